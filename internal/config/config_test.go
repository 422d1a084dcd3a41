package config

import (
	"strings"
	"testing"

	"github.com/payments/payments/internal/keyring"
)

// PAYMENTS_CODEC_KEYS, when set, is the ring every client seals with; a wrong one stops the
// process with the variable named and the key not shown.
func TestCodecKeys(t *testing.T) {
	t.Setenv("PAYMENTS_CODEC_KEYS", "")
	if c, err := FromEnv(); err != nil || c.Temporal.Keys != nil {
		t.Fatalf("unset: keys %v, %v", c.Temporal.Keys, err)
	}
	good := keyring.Generate("k1")
	t.Setenv("PAYMENTS_CODEC_KEYS", good)
	if c, err := FromEnv(); err != nil || c.Temporal.Keys == nil || c.Temporal.Keys.KeyID() != "k1" {
		t.Fatalf("set: %v, %v", c.Temporal.Keys, err)
	}
	if opts, err := (Temporal{Keys: mustParse(t, good)}).ClientOptions(); err != nil || opts.DataConverter == nil || opts.FailureConverter == nil {
		t.Fatalf("client options without the codec: %+v, %v", opts, err)
	}
	short := good[:len(good)-10]
	t.Setenv("PAYMENTS_CODEC_KEYS", short)
	_, err := FromEnv()
	if err == nil || !strings.Contains(err.Error(), "PAYMENTS_CODEC_KEYS") || strings.Contains(err.Error(), short[3:15]) {
		t.Fatalf("a short key: %v", err)
	}
}

func mustParse(t *testing.T, s string) *keyring.Ring {
	r, err := keyring.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
