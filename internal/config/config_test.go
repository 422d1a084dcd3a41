package config

import (
	"strings"
	"testing"
	"time"

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

// Unless told otherwise, every listener is on loopback (contract §10).
func TestListenersDefaultToLoopback(t *testing.T) {
	for _, name := range []string{"PAYMENTS_HTTP_ADDR", "PAYMENTS_METRICS_ADDR", "PAYMENTS_CODEC_ADDR"} {
		t.Setenv(name, "")
	}
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{"PAYMENTS_HTTP_ADDR": c.HTTPAddr, "PAYMENTS_METRICS_ADDR": c.MetricsAddr,
		"PAYMENTS_CODEC_ADDR": c.CodecServer.Addr} {
		if !strings.HasPrefix(got, "127.0.0.1:") {
			t.Errorf("%s defaults to %q, want loopback", name, got)
		}
	}
}

// PAYMENTS_RATE_LIMIT defaults to 100 a second per key and takes only a positive number.
func TestRateLimit(t *testing.T) {
	t.Setenv("PAYMENTS_RATE_LIMIT", "")
	if c, err := FromEnv(); err != nil || c.RateLimit != 100 {
		t.Fatalf("default: %v %v", c.RateLimit, err)
	}
	t.Setenv("PAYMENTS_RATE_LIMIT", "2.5")
	if c, err := FromEnv(); err != nil || c.RateLimit != 2.5 {
		t.Fatalf("2.5: %v %v", c.RateLimit, err)
	}
	for _, bad := range []string{"0", "-1", "fast", "NaN", "Inf", "1e999"} {
		t.Setenv("PAYMENTS_RATE_LIMIT", bad)
		if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), "PAYMENTS_RATE_LIMIT") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}

// Approvals: no threshold and 72h unless set; a threshold is an amount above 0, a timeout at
// least a second.
func TestApprovals(t *testing.T) {
	t.Setenv("PAYMENTS_APPROVAL_THRESHOLD_MINOR", "")
	t.Setenv("PAYMENTS_APPROVAL_TIMEOUT", "")
	if c, err := FromEnv(); err != nil || c.Approvals.ThresholdMinor != 0 || c.Approvals.Timeout != 72*time.Hour {
		t.Fatalf("defaults: %+v %v", c.Approvals, err)
	}
	t.Setenv("PAYMENTS_APPROVAL_THRESHOLD_MINOR", "100000")
	t.Setenv("PAYMENTS_APPROVAL_TIMEOUT", "90s")
	if c, err := FromEnv(); err != nil || c.Approvals.ThresholdMinor != 100000 || c.Approvals.Timeout != 90*time.Second {
		t.Fatalf("set: %+v %v", c.Approvals, err)
	}
	for name, bad := range map[string][]string{"PAYMENTS_APPROVAL_THRESHOLD_MINOR": {"0", "-5", "1.5", "lots"},
		"PAYMENTS_APPROVAL_TIMEOUT": {"0s", "500ms", "soon"}} {
		for _, v := range bad {
			t.Setenv(name, v)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%q: %v, want an error naming the variable", name, v, err)
			}
		}
		t.Setenv(name, "")
	}
}
