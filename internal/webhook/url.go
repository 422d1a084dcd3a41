package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxURLLength bounds an endpoint URL, which is stored and logged with every delivery.
const maxURLLength = 2048

// ErrURLRefused is wrapped by every error of Check and Control.
var ErrURLRefused = errors.New("webhook URL refused")

// refusal is an error of Check or Control: a sentence for the client. It matches ErrURLRefused
// and any resolver error (errors.Is), so a caller can still tell a DNS timeout from a bad URL.
type refusal struct {
	reason string
	cause  error
}

func (r *refusal) Error() string { return r.reason }

func (r *refusal) Unwrap() []error {
	if r.cause == nil {
		return []error{ErrURLRefused}
	}
	return []error{ErrURLRefused, r.cause}
}

func refuse(reason string) error { return &refusal{reason: reason} }

// Policy decides which URLs webhooks may be delivered to (docs/contract.md §7): https only, never
// to a non-public address, which would let a client aim this service at its own network (SSRF).
type Policy struct {
	AllowInsecure bool // http and any address, for receivers on a developer's machine
	// LoopbackOnly allows loopback receivers named by IP only (the tests': nothing else is ever a
	// target, even by mistake, and no name is looked up), at Check and again at connect time.
	LoopbackOnly bool
	// Resolve returns the addresses of a host name (nil: net.DefaultResolver); tests avoid DNS.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Check returns raw parsed if webhooks may be delivered to it. A URL accepted here may still be
// refused at delivery: a name can resolve elsewhere later (DNS rebinding), which Control catches.
func (p Policy) Check(ctx context.Context, raw string) (*url.URL, error) {
	if len(raw) > maxURLLength {
		return nil, refuse("must be at most " + strconv.Itoa(maxURLLength) + " bytes")
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return nil, refuse("must be an absolute URL, such as https://example.com/webhooks")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowInsecure:
	case p.AllowInsecure:
		return nil, refuse("must use https or http")
	default:
		return nil, refuse("must use https")
	}
	host := u.Hostname()
	if host == "" {
		return nil, refuse("must have a host")
	}
	if u.User != nil {
		// Credentials in a URL are echoed by the API and written to logs with every delivery;
		// the signature is what authenticates a delivery.
		return nil, refuse("must not contain a user name or password")
	}
	// url.Parse keeps no trace of an empty fragment ("https://x/#"); any '#' is one, as an
	// unescaped '#' can mean nothing else.
	if strings.Contains(raw, "#") {
		return nil, refuse("must not contain a fragment (#)")
	}
	if port := u.Port(); port != "" {
		// url.Parse checks only that the port is digits; say so now rather than fail every delivery.
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, refuse("must have a port from 1 to 65535")
		}
	}
	if p.LoopbackOnly { // an IP literal: a name would be looked up, and the lookup could leave the machine
		if a, err := netip.ParseAddr(host); err != nil || !a.Unmap().IsLoopback() {
			return nil, refuse("must be a loopback address here (127.0.0.1 or ::1)")
		}
	}
	if p.AllowInsecure {
		// Local receivers: localhost and private addresses are the point, so nothing is resolved.
		return u, nil
	}

	if a, err := netip.ParseAddr(host); err == nil {
		if !Allowed(a) {
			return nil, refuse("must not be a loopback, private, link-local or otherwise non-public address")
		}
		return u, nil
	}
	// These names are local by definition (RFC 6761, RFC 6762, ICANN's .internal); refusing them
	// by name does not depend on what this machine's resolver happens to answer.
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") ||
		strings.HasSuffix(name, ".local") || strings.HasSuffix(name, ".internal") {
		return nil, refuse("must not name a local host (localhost, .local, .internal)")
	}
	resolve := p.Resolve
	if resolve == nil {
		resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	addrs, err := resolve(ctx, host)
	if err != nil {
		return nil, &refusal{reason: "host name could not be resolved", cause: err}
	}
	if len(addrs) == 0 {
		return nil, refuse("host name resolves to no address")
	}
	for _, a := range addrs {
		// One bad address is enough: a connection may pick any of them.
		if !Allowed(a) {
			return nil, refuse("host name must not resolve to a loopback, private, link-local or otherwise non-public address")
		}
	}
	return u, nil
}

// Prefixes netip's tests do not call loopback, private, link-local or multicast but that are no
// place for a webhook, and IPv6 ranges that carry an IPv4 address or lead to one.
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT; 100.100.100.200 is a cloud metadata address
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255 broadcast
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated), and :: and ::1
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64: where the IPv4 address sits is the network's choice
	netip.MustParsePrefix("2001::/32"),       // Teredo: tunnels to an IPv4 address hidden in the bits
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated, still routed internally by some networks)
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // last 32 bits are the IPv4 address
	sixToFour = netip.MustParsePrefix("2002::/16")    // bits 16..48 are the IPv4 address
)

// Allowed reports whether a is a public unicast address. An IPv6 address leading to an IPv4 one
// (IPv4-mapped, NAT64, 6to4) is judged by that address, so ::ffff:127.0.0.1 cannot reach
// loopback. Zoned addresses are refused: a zone only means something for link-local ones.
func Allowed(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	if a.IsUnspecified() || a.IsLoopback() || a.IsPrivate() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsMulticast() || a.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range refusedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return Allowed(netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(a):
		return Allowed(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return true
}

// Control is for net.Dialer.Control: it refuses an address that is not Allowed, at dial time,
// which stops a name pointed at a private address since Check (DNS rebinding).
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	if p.AllowInsecure && !p.LoopbackOnly {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return &refusal{reason: "refusing to connect to " + address + ": not host:port", cause: err}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return &refusal{reason: "refusing to connect to " + address + ": not an IP address", cause: err}
	}
	if p.LoopbackOnly && !a.Unmap().IsLoopback() {
		return refuse("refusing to connect to " + address + ": not a loopback address")
	}
	if !p.AllowInsecure && !Allowed(a) {
		return refuse("refusing to connect to " + address + ": not a public address")
	}
	return nil
}

// Client returns an HTTP client whose connections go through Control, every phase within timeout.
func (p Policy) Client(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, Control: p.Control}
	transport := &http.Transport{
		// Never a proxy from the environment: the proxy, not Control, would then pick the
		// address, and deliveries would leave through whatever HTTPS_PROXY says.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true, // a custom DialContext turns HTTP/2 off unless asked for
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   timeout,
		// A 3xx is not a delivery, and following it could lead anywhere, a URL Check never saw.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
