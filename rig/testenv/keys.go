package testenv

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/internal/keyring"
)

// CodecKeys is the tests' PAYMENTS_CODEC_KEYS: every Env's processes, workers and clients seal
// what they write to Temporal with it, as a deployment does with its own. It is a test key,
// known to all, and fixed, so that the histories the tests record (under
// workflows/testdata/histories) replay with it. Never a deployment's.
const CodecKeys = "test-2026-12=dGVzdC1rZXktb25seS1ub3QtZm9yLWRlcGxveW1lbnQ="

// Keys is CodecKeys parsed.
var Keys = func() *keyring.Ring {
	r, err := keyring.Parse(CodecKeys)
	if err != nil {
		panic(err)
	}
	return r
}()

// Converter is the data converter of every Env's clients: the payload codec's, with Keys.
var Converter converter.DataConverter = codec.DataConverter(Keys)

// ClientOptions are the options of a test's own client of the Temporal at hostPort (through a
// proxy, say): sealing with Keys, as the Env's clients do.
func ClientOptions(hostPort string) client.Options {
	opts := client.Options{HostPort: hostPort}
	codec.Configure(&opts, Keys)
	return opts
}
