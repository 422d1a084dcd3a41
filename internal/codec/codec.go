// Package codec encrypts what the processor writes to Temporal (contract §10): a payload codec
// sealing every payload with the key ring, the converters every client and worker is given, and
// the remote codec protocol the Temporal Web UI and CLI decode through (`payments codec-server`).
package codec

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/payments/payments/internal/keyring"
)

// The metadata of an encrypted payload. The payload it holds is sealed whole, metadata and data,
// so that not even its encoding is readable.
const (
	MetadataEncoding  = converter.MetadataEncoding
	EncodingEncrypted = "binary/encrypted"
	MetadataKeyID     = "encryption-key-id"
)

// aad binds a sealed payload to being one: a secret sealed by the same ring cannot pass for one.
var aad = []byte("temporal-payload")

// Codec is the payload codec of ring.
type Codec struct{ Ring *keyring.Ring }

// Encode seals each payload with the ring's first key.
func (c Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encoding a payload: %w", err)
		}
		id, sealed := c.Ring.Seal(plain, aad)
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{MetadataEncoding: []byte(EncodingEncrypted), MetadataKeyID: []byte(id)},
			Data:     sealed,
		}
	}
	return out, nil
}

// Decode opens each sealed payload and passes every other one as it is (histories from before
// encryption).
func (c Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[MetadataEncoding]) != EncodingEncrypted {
			out[i] = p
			continue
		}
		plain, err := c.Ring.Open(string(p.GetMetadata()[MetadataKeyID]), p.GetData(), aad)
		if err != nil {
			return nil, fmt.Errorf("decoding a payload: %w", err)
		}
		out[i] = &commonpb.Payload{}
		if err := proto.Unmarshal(plain, out[i]); err != nil {
			return nil, fmt.Errorf("decoding a payload: %w", err)
		}
	}
	return out, nil
}

// DataConverter is the SDK's default converter with every payload sealed by ring.
func DataConverter(ring *keyring.Ring) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), Codec{Ring: ring})
}

// FailureConverter encodes failures' messages and stack traces with dc too: an error's text may
// quote what it failed on (a bank's refusal, a value PostgreSQL would not store).
func FailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter: dc, EncodeCommonAttributes: true,
	})
}

// Configure gives opts the converters sealing with keys; nil keys leave payloads in the clear.
func Configure(opts *client.Options, keys *keyring.Ring) {
	if keys == nil {
		return
	}
	opts.DataConverter = DataConverter(keys)
	opts.FailureConverter = FailureConverter(opts.DataConverter)
}
