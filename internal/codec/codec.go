// Package codec encrypts what the processor writes to Temporal (contract §10): a payload codec
// sealing every payload with the key ring (AES-256-GCM, the key's id in the payload's metadata),
// the data and failure converters every client and worker the processor starts is given, and
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

// The metadata of an encrypted payload: its encoding, and the id of the key that sealed it. The
// payload it holds, metadata and data, is sealed whole, so that not even its encoding (a JSON
// string, a protobuf message) is readable.
const (
	MetadataEncoding  = converter.MetadataEncoding
	EncodingEncrypted = "binary/encrypted"
	MetadataKeyID     = "encryption-key-id"
)

// aad binds a sealed payload to being one: a secret sealed at rest by the same ring
// (keyring's other users) cannot be passed off as a payload, nor a payload as a secret.
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

// Decode opens each sealed payload, with the key its metadata names, and passes every other
// one as it is: the payloads of histories written before encryption decode as they always did.
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

// FailureConverter encodes failures' messages and stack traces with dc as well as their
// details: an error's text may quote what it failed on (a bank's refusal, a value PostgreSQL
// would not store), so it is data like any other. The Web UI shows it decoded through the codec
// server; a reader of the history without the keys sees "Encoded failure".
func FailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter: dc, EncodeCommonAttributes: true,
	})
}

// Configure gives opts the converters sealing with keys; with nil keys it leaves them as they
// are (payloads in the clear).
func Configure(opts *client.Options, keys *keyring.Ring) {
	if keys == nil {
		return
	}
	opts.DataConverter = DataConverter(keys)
	opts.FailureConverter = FailureConverter(opts.DataConverter)
}
