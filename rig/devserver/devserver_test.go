package devserver

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"

	"github.com/payments/payments/workflows"
)

func binary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "temporal"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// The server Start returns answers with the transfer search attributes registered, and Stop
// shuts it down cleanly.
func TestStartAndStop(t *testing.T) {
	s, err := Start(context.Background(), Options{Binary: binary(t), DBFile: filepath.Join(t.TempDir(), "temporal.db"), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().OperatorService().ListSearchAttributes(context.Background(),
		&operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		_ = s.Stop()
		t.Fatal(err)
	}
	for name, typ := range workflows.SearchAttributeTypes {
		if got := resp.GetCustomAttributes()[name]; got != typ {
			t.Errorf("search attribute %s: %v, want %v", name, got, typ)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if c, err := net.DialTimeout("tcp", s.FrontendHostPort(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the server still answers after Stop")
	}
}

// Start on an address already taken fails at once, rather than answer with the server already
// there.
func TestStartOnATakenAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := Start(context.Background(), Options{Binary: binary(t), HostPort: l.Addr().String()})
	if err == nil {
		_ = s.Stop()
		t.Fatal("Start succeeded on a taken address")
	}
	if !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("the error does not name the address: %v", err)
	}
}
