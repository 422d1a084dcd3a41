package testenv

import (
	"testing"

	"github.com/payments/payments/rig/proxy"
)

// Proxy is a proxy.Proxy a test breaks on purpose: Cut, Restore, Freeze.
type Proxy = proxy.Proxy

// NewProxy listens on a free local port and forwards to target until t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := proxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
