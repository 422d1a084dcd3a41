package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/webhook"
)

var (
	testNow  = time.Unix(1767225600, 123456789) // 2026-01-01T00:00:00.123456789Z
	testBody = []byte(`{"id":"evt_1","type":"transfer.completed"}`)
)

const testSecret = "whsec_0123456789abcdef"

// TestSignMatchesContract computes the header from the contract's words alone
// (docs/contract.md §7), without any of the package's code.
func TestSignMatchesContract(t *testing.T) {
	h := hmac.New(sha256.New, []byte(testSecret))
	fmt.Fprintf(h, "%d.%s", testNow.Unix(), testBody)
	want := fmt.Sprintf("t=%d,v1=%s", testNow.Unix(), hex.EncodeToString(h.Sum(nil)))
	if got := webhook.Sign(testSecret, testNow, testBody); got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	if want != "t=1767225600,v1="+hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("header %q does not carry whole unix seconds", want)
	}
}

func TestVerifyRoundTrip(t *testing.T) {
	header := webhook.Sign(testSecret, testNow, testBody)
	if err := webhook.Verify(testSecret, header, testBody, testNow, webhook.DefaultTolerance); err != nil {
		t.Fatalf("Verify of Sign's header: %v", err)
	}
	// The edges of the window are inside it.
	for _, now := range []time.Time{testNow.Add(5 * time.Minute), testNow.Add(-5 * time.Minute)} {
		if err := webhook.Verify(testSecret, header, testBody, now, webhook.DefaultTolerance); err != nil {
			t.Errorf("Verify at %s: %v", now.Sub(testNow), err)
		}
	}
	// An empty body is signed like any other.
	if err := webhook.Verify(testSecret, webhook.Sign(testSecret, testNow, nil), []byte{}, testNow, webhook.DefaultTolerance); err != nil {
		t.Errorf("empty body: %v", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	header := webhook.Sign(testSecret, testNow, testBody)
	tampered := append([]byte(nil), testBody...)
	tampered[len(tampered)-2] = 'X'
	for _, tc := range []struct {
		name   string
		secret string
		header string
		body   []byte
		now    time.Time
		want   error
	}{
		{"tampered body", testSecret, header, tampered, testNow, webhook.ErrNoMatch},
		{"body with a byte more", testSecret, header, append(append([]byte(nil), testBody...), ' '), testNow, webhook.ErrNoMatch},
		{"wrong secret", "whsec_other", header, testBody, testNow, webhook.ErrNoMatch},
		{"6 minutes old", testSecret, header, testBody, testNow.Add(6 * time.Minute), webhook.ErrTooOld},
		{"6 minutes ahead", testSecret, header, testBody, testNow.Add(-6 * time.Minute), webhook.ErrTooOld},
		// A timestamp changed to a fresh one no longer matches: t is under the MAC.
		{"t replaced", testSecret, strings.Replace(header, "t=1767225600", "t=1767225601", 1), testBody, testNow, webhook.ErrNoMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := webhook.Verify(tc.secret, tc.header, tc.body, tc.now, webhook.DefaultTolerance)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestVerifyGarbledHeaders(t *testing.T) {
	sig := strings.TrimPrefix(webhook.Sign(testSecret, testNow, testBody), "t=1767225600,")
	for _, header := range []string{
		"",
		",",
		"garbage",
		sig,                             // no t
		"t=1767225600",                  // no v1
		"t=1767225600,v0=abc",           // only an unknown scheme
		"t=," + sig,                     // empty t
		"t=abc," + sig,                  // not a number
		"t=1767225600.5," + sig,         // not whole seconds
		"t=+1767225600," + sig,          // not the form Sign writes
		"t=01767225600," + sig,          // leading zero
		"t=99999999999999999999," + sig, // beyond int64
		"t=1767225600,t=1767225600," + sig,
		"t=1767225600,," + sig,
		"t=1767225600;" + sig,
	} {
		err := webhook.Verify(testSecret, header, testBody, testNow, webhook.DefaultTolerance)
		if !errors.Is(err, webhook.ErrBadHeader) {
			t.Errorf("Verify(%q) = %v, want ErrBadHeader", header, err)
		}
	}
}

func TestVerifyRotation(t *testing.T) {
	good := webhook.Sign(testSecret, testNow, testBody)
	_, goodSig, _ := strings.Cut(good, ",v1=")
	other := webhook.Sign("whsec_old", testNow, testBody)
	_, otherSig, _ := strings.Cut(other, ",v1=")
	for _, header := range []string{
		"t=1767225600,v1=" + otherSig + ",v1=" + goodSig,
		"t=1767225600,v1=" + goodSig + ",v1=" + otherSig,
		"v1=" + goodSig + ",t=1767225600",
		"t=1767225600,v0=deadbeef,v1=nothex,v1=" + goodSig + ",future=x=y",
		"t=1767225600, v1=" + strings.ToUpper(goodSig),
	} {
		if err := webhook.Verify(testSecret, header, testBody, testNow, webhook.DefaultTolerance); err != nil {
			t.Errorf("Verify(%q) = %v, want nil", header, err)
		}
	}
	header := "t=1767225600,v1=" + otherSig + ",v1=" + otherSig
	if err := webhook.Verify(testSecret, header, testBody, testNow, webhook.DefaultTolerance); !errors.Is(err, webhook.ErrNoMatch) {
		t.Errorf("Verify with no matching v1 = %v, want ErrNoMatch", err)
	}
}

func TestVerifyExtremeTimestamps(t *testing.T) {
	// Forged timestamps at the int64 limits must not wrap around into the window.
	for _, ts := range []string{"9223372036854775807", "-9223372036854775808", "0"} {
		header := "t=" + ts + ",v1=00"
		if err := webhook.Verify(testSecret, header, testBody, testNow, webhook.DefaultTolerance); !errors.Is(err, webhook.ErrTooOld) {
			t.Errorf("Verify(%q) = %v, want ErrTooOld", header, err)
		}
	}
}

func TestNewSecret(t *testing.T) {
	re := regexp.MustCompile(`^whsec_[0-9a-f]{64}$`)
	a, b := webhook.NewSecret(), webhook.NewSecret()
	if !re.MatchString(a) || !re.MatchString(b) {
		t.Fatalf("secrets %q, %q do not match %s", a, b, re)
	}
	if a == b {
		t.Fatalf("two secrets are equal: %q", a)
	}
}
