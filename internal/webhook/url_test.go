package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/webhook"
)

func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"100.100.100.200", false}, // cloud metadata, in carrier-grade NAT space
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"192.0.0.170", false},
		{"192.0.2.1", false},
		{"198.18.0.1", false},
		{"198.51.100.1", false},
		{"203.0.113.1", false},
		{"240.0.0.1", false},
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"255.255.255.255", false},
		{"::", false},
		{"::1", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"fc00::1", false},
		{"fd00:ec2::254", false}, // AWS metadata over IPv6
		{"fec0::1", false},
		{"ff02::1", false},
		{"ff01::1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:100.100.100.200", false}, // the prefix list, not only netip's tests, sees through the mapping
		{"::ffff:198.18.0.1", false},
		{"::127.0.0.1", false}, // IPv4-compatible
		{"::8.8.8.8", false},
		{"64:ff9b::7f00:1", false},     // NAT64 to 127.0.0.1
		{"64:ff9b::a9fe:a9fe", false},  // NAT64 to 169.254.169.254
		{"64:ff9b:1::808:808", false},  // local-use NAT64
		{"2002:7f00:1::1", false},      // 6to4 of 127.0.0.1
		{"2002:a00:1::1", false},       // 6to4 of 10.0.0.1
		{"2001:db8::1", false},         // documentation
		{"2001:0:4136:e378::1", false}, // Teredo
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"93.184.216.34", true},
		{"2606:4700:4700::1111", true},
		{"2001:4860:4860::8888", true},
		{"::ffff:8.8.8.8", true},
		{"64:ff9b::808:808", true}, // NAT64 to 8.8.8.8
		{"2002:808:808::1", true},  // 6to4 of 8.8.8.8
		{"172.32.0.1", true},
		{"100.128.0.1", true},
	} {
		a := netip.MustParseAddr(tc.addr)
		if got := webhook.Allowed(a); got != tc.want {
			t.Errorf("Allowed(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if webhook.Allowed(netip.Addr{}) {
		t.Error("Allowed(zero Addr) = true")
	}
}

// resolver answers from a table and fails the test for any name not in it, so that a test
// states every lookup it expects; no test does a real DNS lookup.
func resolver(t *testing.T, answers map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		addrs, ok := answers[host]
		if !ok {
			t.Errorf("unexpected lookup of %q", host)
			return nil, errors.New("unexpected lookup")
		}
		var out []netip.Addr
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
}

func TestCheckAccepts(t *testing.T) {
	p := webhook.Policy{Resolve: resolver(t, map[string][]string{
		"hooks.example.com":  {"93.184.216.34"},
		"dual.example.com":   {"93.184.216.34", "2606:4700:4700::1111"},
		"hooks.example.com.": {"93.184.216.34"},
	})}
	for _, raw := range []string{
		"https://hooks.example.com/webhooks",
		"https://hooks.example.com:8443/a/b?c=d",
		"HTTPS://hooks.example.com/",
		"https://dual.example.com/",
		"https://hooks.example.com./",
		"https://8.8.8.8/hook",
		"https://[2606:4700:4700::1111]:443/",
	} {
		u, err := p.Check(context.Background(), raw)
		if err != nil {
			t.Errorf("Check(%q) = %v, want accepted", raw, err)
			continue
		}
		if u.Scheme != "https" {
			t.Errorf("Check(%q) scheme = %q", raw, u.Scheme)
		}
	}
}

func TestCheckRefuses(t *testing.T) {
	p := webhook.Policy{Resolve: resolver(t, map[string][]string{
		"hooks.example.com": {"93.184.216.34"},
		"mixed.example.com": {"93.184.216.34", "10.0.0.5"},
		"meta.example.com":  {"169.254.169.254"},
		"v6.example.com":    {"2606:4700:4700::1111", "::1"},
		"empty.example.com": {},
	})}
	for _, tc := range []struct {
		raw  string
		want string // in the error's text
	}{
		{"http://hooks.example.com/", "https"},
		{"ftp://hooks.example.com/", "https"},
		{"https://mixed.example.com/", "must not resolve"},
		{"https://meta.example.com/", "must not resolve"},
		{"https://v6.example.com/", "must not resolve"},
		{"https://empty.example.com/", "no address"},
		{"https://localhost/", "local host"},
		{"https://LOCALHOST./", "local host"},
		{"https://foo.localhost/", "local host"},
		{"https://x.internal/", "local host"},
		{"https://printer.local/", "local host"},
		{"https://127.0.0.1:8443/", "non-public"},
		{"https://[::1]/", "non-public"},
		{"https://[::ffff:127.0.0.1]/", "non-public"},
		{"https://[fe80::1%25eth0]/", "non-public"},
		{"https://0.0.0.0/", "non-public"},
		{"https://user:pass@hooks.example.com/", "user name or password"},
		{"https://user@hooks.example.com/", "user name or password"},
		{"https://hooks.example.com/#frag", "fragment"},
		{"https://hooks.example.com/#", "fragment"},
		{"https://hooks.example.com:99999/", "port"},
		{"https://hooks.example.com:0/", "port"},
		{"https:///path", "host"},
		{"https:hooks.example.com", "absolute"},
		{"/relative/path", "absolute"},
		{"hooks.example.com", "absolute"},
		{"", "absolute"},
		{"https://hooks.example.com/\x00", "absolute"},
		{"https://hooks.example.com/" + strings.Repeat("a", 2048), "2048"},
	} {
		u, err := p.Check(context.Background(), tc.raw)
		if err == nil {
			t.Errorf("Check(%q) accepted %v", tc.raw, u)
			continue
		}
		if !errors.Is(err, webhook.ErrURLRefused) {
			t.Errorf("Check(%q) = %v, does not wrap ErrURLRefused", tc.raw, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q) = %q, want it to mention %q", tc.raw, err, tc.want)
		}
	}
}

func TestCheckResolveError(t *testing.T) {
	lookupErr := &net.DNSError{Err: "no such host", Name: "nx.example.com", IsNotFound: true}
	p := webhook.Policy{Resolve: func(context.Context, string) ([]netip.Addr, error) { return nil, lookupErr }}
	_, err := p.Check(context.Background(), "https://nx.example.com/")
	if !errors.Is(err, webhook.ErrURLRefused) {
		t.Fatalf("Check = %v, want ErrURLRefused", err)
	}
	if !errors.Is(err, lookupErr) {
		t.Errorf("Check = %v, want the resolver's error kept for the log", err)
	}
	// The client reads this sentence; the resolver's wording stays out of it.
	if err.Error() != "host name could not be resolved" {
		t.Errorf("message = %q", err)
	}
}

func TestCheckInsecure(t *testing.T) {
	noLookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		t.Errorf("resolver called for %q with AllowInsecure", host)
		return nil, errors.New("unexpected lookup")
	}
	p := webhook.Policy{AllowInsecure: true, Resolve: noLookup}
	for _, raw := range []string{
		"http://127.0.0.1:9999/hook",
		"http://localhost:8080/",
		"https://10.0.0.1/",
		"http://receiver.internal/",
	} {
		if _, err := p.Check(context.Background(), raw); err != nil {
			t.Errorf("Check(%q) = %v, want accepted", raw, err)
		}
	}
	// The rest of the rules still hold.
	for _, raw := range []string{
		"ftp://127.0.0.1/",
		"http://u:p@127.0.0.1/",
		"http://127.0.0.1/#x",
		"127.0.0.1:9999",
	} {
		if _, err := p.Check(context.Background(), raw); !errors.Is(err, webhook.ErrURLRefused) {
			t.Errorf("Check(%q) = %v, want refused", raw, err)
		}
	}
}

func TestControl(t *testing.T) {
	var strict webhook.Policy
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "10.0.0.1:80", "169.254.169.254:80", "[::ffff:127.0.0.1]:443", "[fe80::1%eth0]:443", "not-an-ip:443", "127.0.0.1"} {
		if err := strict.Control("tcp", addr, nil); !errors.Is(err, webhook.ErrURLRefused) {
			t.Errorf("Control(%q) = %v, want refused", addr, err)
		}
	}
	for _, addr := range []string{"8.8.8.8:443", "[2606:4700:4700::1111]:443"} {
		if err := strict.Control("tcp", addr, nil); err != nil {
			t.Errorf("Control(%q) = %v, want allowed", addr, err)
		}
	}
	insecure := webhook.Policy{AllowInsecure: true}
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "10.0.0.1:80", "garbage"} {
		if err := insecure.Control("tcp", addr, nil); err != nil {
			t.Errorf("insecure Control(%q) = %v, want allowed", addr, err)
		}
	}
}

// TestClient checks the client's configuration only; it sends nothing.
func TestClient(t *testing.T) {
	c := webhook.Policy{}.Client(7 * time.Second)
	if c.Timeout != 7*time.Second {
		t.Errorf("Timeout = %s", c.Timeout)
	}
	tr, ok := c.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("Transport is %T", c.Transport)
	}
	if tr == http.DefaultTransport {
		t.Error("Transport is the shared default")
	}
	if tr.Proxy != nil {
		t.Error("Transport takes a proxy")
	}
	if tr.DialContext == nil {
		t.Error("Transport has no DialContext, so Control is not used")
	}
	if tr.TLSHandshakeTimeout != 7*time.Second || tr.ResponseHeaderTimeout != 7*time.Second {
		t.Errorf("timeouts: TLS %s, response header %s", tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout)
	}
	if tr.MaxIdleConnsPerHost != 4 || tr.IdleConnTimeout != 90*time.Second {
		t.Errorf("idle: %d per host, %s", tr.MaxIdleConnsPerHost, tr.IdleConnTimeout)
	}
	if c.CheckRedirect == nil || c.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Error("redirects are followed")
	}
}

// LoopbackOnly (the tests' policy) refuses every other target, at creation and at connect time,
// whatever AllowInsecure says.
func TestLoopbackOnly(t *testing.T) {
	p := webhook.Policy{AllowInsecure: true, LoopbackOnly: true, Resolve: func(context.Context, string) ([]netip.Addr, error) {
		t.Fatal("LoopbackOnly with AllowInsecure resolves nothing")
		return nil, nil
	}}
	for raw, ok := range map[string]bool{
		"http://127.0.0.1:9/h": true, "http://[::1]:9/h": true, "http://localhost:9/h": false,
		"http://10.0.0.1/h": false, "https://example.com/h": false, "http://8.8.8.8/h": false,
	} {
		if _, err := p.Check(context.Background(), raw); (err == nil) != ok {
			t.Errorf("Check(%s): %v, want accepted %v", raw, err, ok)
		}
	}
	for addr, ok := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "8.8.8.8:443": false, "10.0.0.1:80": false} {
		if err := p.Control("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("Control(%s): %v, want allowed %v", addr, err, ok)
		}
	}
}

// A client of a policy that is not insecure refuses, before connecting, an address that is not
// public: the receiver here (on loopback) never sees the request.
func TestClientRefusesAtConnectTime(t *testing.T) {
	hit := false
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit = true }))
	defer srv.Close()
	_, err := webhook.Policy{}.Client(time.Second).Get(srv.URL)
	if !errors.Is(err, webhook.ErrURLRefused) || hit {
		t.Fatalf("GET %s: %v (reached: %v), want refused before connecting", srv.URL, err, hit)
	}
}
