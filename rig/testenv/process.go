package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/payments/payments/rig/supervise"
)

// FreeAddr is a local host:port nothing listens on now (supervise.FreeHostPort).
func FreeAddr() string {
	addr, err := supervise.FreeHostPort()
	if err != nil {
		panic(err)
	}
	return addr
}

// BuildPayments builds the payments command (once per test process), for tests that run it as
// a process they can kill.
func BuildPayments(t testing.TB) string {
	t.Helper()
	bin, err := paymentsBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// paymentsBinary builds the payments command once per test process.
var paymentsBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("payments-bin-%d-", os.Getpid()))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "payments")
	return bin, supervise.BuildPayments(context.Background(), bin)
})

// Process starts bin with args and the Env's database and Temporal (or temporalAddr when not
// empty) in its environment. It is killed when t ends, or when this process dies (see
// supervise.Start), and its stderr shown if t failed. The caller may kill it, but must not
// Wait for it.
func (e *Env) Process(t testing.TB, bin, temporalAddr string, args []string, env ...string) *exec.Cmd {
	t.Helper()
	if temporalAddr == "" {
		temporalAddr = e.TemporalAddr()
	}
	cmd := exec.Command(bin, args...)
	// A small pool: test packages run in parallel, each with several processes, against one
	// PostgreSQL with max_connections 100 by default. env may set DATABASE_URL again; the last
	// one wins.
	// A worker's metrics listen on a free loopback port unless env says where: never on every
	// interface (the default :9090), and never on another package's. The tests send far more
	// than 100 requests a second on one key: the rate limit is theirs to set (env).
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+e.URL+"&pool_max_conns=4", "TEMPORAL_ADDRESS="+temporalAddr,
		"PAYMENTS_BANK_URL="+e.bankURL, "PAYMENTS_BANK_SECRET="+BankSecret, "PAYMENTS_METRICS_ADDR="+FreeAddr(),
		"PAYMENTS_CODEC_KEYS="+CodecKeys, "PAYMENTS_RATE_LIMIT=1000000"), env...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	proc, err := supervise.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = proc.Kill()
		if t.Failed() {
			t.Logf("%s %v log:\n%s", filepath.Base(bin), args, logs.String())
		}
	})
	return cmd
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartAPI starts `payments api` (bin) on a free port, reaching Temporal at temporalAddr (a
// proxy) when not empty and the Env's otherwise, and returns the process and its base URL once
// it is ready. env adds to its environment.
func (e *Env) StartAPI(t testing.TB, bin, temporalAddr string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	addr := FreeAddr()
	cmd := e.Process(t, bin, temporalAddr, []string{"api"}, append([]string{"PAYMENTS_HTTP_ADDR=" + addr}, env...)...)
	base := "http://" + addr
	if err := supervise.WaitReady(context.Background(), "payments api", time.Minute, 10*time.Millisecond, nil,
		supervise.HTTPReady(base+"/readyz")); err != nil {
		t.Fatal(err)
	}
	return cmd, base
}
