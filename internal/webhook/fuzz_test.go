package webhook_test

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/webhook"
)

func FuzzVerify(f *testing.F) {
	f.Add(testSecret, webhook.Sign(testSecret, testNow, testBody), testBody, testNow.Unix())
	f.Add("", "", []byte{}, int64(0))
	f.Add("s", "t=1,v1=00,v1=zz,v0=1", []byte("x"), int64(1))
	f.Add("s", "t=-1,v1=", []byte("\x00"), int64(-1))
	f.Add("s", "t=9223372036854775807,v1=ab", []byte("{}"), int64(9223372036854775807))
	f.Add("s", ",,=,t==,v1", []byte(nil), int64(-9223372036854775808))
	f.Fuzz(func(t *testing.T, secret, header string, body []byte, sec int64) {
		now := time.Unix(sec, 0)
		err := webhook.Verify(secret, header, body, now, webhook.DefaultTolerance)
		if err != nil && !errors.Is(err, webhook.ErrBadHeader) && !errors.Is(err, webhook.ErrTooOld) && !errors.Is(err, webhook.ErrNoMatch) {
			t.Fatalf("Verify(%q) = %v, not one of the sentinels", header, err)
		}
		signed := webhook.Sign(secret, now, body)
		if err := webhook.Verify(secret, signed, body, now, webhook.DefaultTolerance); err != nil {
			t.Fatalf("Verify of Sign's %q: %v", signed, err)
		}
		if err := webhook.Verify(secret, signed, body, now.Add(webhook.DefaultTolerance), webhook.DefaultTolerance); err != nil && sec < 1<<62 {
			t.Fatalf("Verify of Sign's %q at the edge of the window: %v", signed, err)
		}
	})
}

// FuzzCheck resolves every name to 127.0.0.1, so the only URLs Check may accept are https with
// a literal address that Allowed accepts.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		"https://hooks.example.com/webhooks",
		"https://8.8.8.8/",
		"https://[::ffff:7f00:1]/",
		"https://[64:ff9b::7f00:1]/",
		"https://[fe80::1%25eth0]/",
		"https://127.1/",
		"https://0x7f000001/",
		"https://2130706433/",
		"https://%31%32%37.0.0.1/",
		"https://localhost./",
		"http://127.0.0.1:9999/hook",
		"https://user:pass@example.com/",
		"https://example.com/#",
		"https://example.com:99999/",
		"//example.com/",
		"https:example.com",
		"",
	} {
		f.Add(s)
	}
	p := webhook.Policy{Resolve: func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := p.Check(context.Background(), raw)
		if err != nil {
			if !errors.Is(err, webhook.ErrURLRefused) || err.Error() == "" {
				t.Fatalf("Check(%q) = %v, not a readable ErrURLRefused", raw, err)
			}
			return
		}
		a, perr := netip.ParseAddr(u.Hostname())
		if perr != nil || !webhook.Allowed(a) {
			t.Fatalf("Check(%q) accepted host %q", raw, u.Hostname())
		}
		if u.Scheme != "https" || u.User != nil || strings.Contains(raw, "#") || len(raw) > 2048 {
			t.Fatalf("Check(%q) accepted %#v", raw, u)
		}
		// What a delivery would dial is what was checked.
		again, err := url.Parse(u.String())
		if err != nil || again.Hostname() != u.Hostname() {
			t.Fatalf("Check(%q): %q re-parses to host %q, %v", raw, u.String(), again.Hostname(), err)
		}
	})
}
