package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/rig/supervise"
)

// bankClient talks to the simulator: not http.DefaultClient, whose answers are held to the API's
// contract.
var bankClient = &http.Client{Timeout: 30 * time.Second}

// BankSecret is the secret the tests' banks sign their callbacks with.
const BankSecret = "test-bank-secret"

// Bank is a bank simulator (`payments banksim`) running as a process of its own for an Env: it
// keeps its own state, makes its own decisions and sends its own signed callbacks to the Env's
// API. Tests change its faults while it runs, and read its statement.
type Bank struct {
	URL   string // where the processor reaches it
	state string // its state file, kept across Restart
	args  []string
	child *supervise.Child
	log   *lockedBuffer
}

// bankArgs are the simulator's defaults in tests: settling in milliseconds, callbacks sent at
// once and retried quickly, no faults until a test asks for them.
func bankArgs(addr, callbackURL, state string) []string {
	return []string{"banksim", "--addr", addr, "--callback-url", callbackURL, "--state", state,
		"--settle-after", "50ms", "--callback-retry-base", "50ms", "--return-after", "200ms", "--seed", "7"}
}

// startBank starts a simulator on addr sending callbacks to callbackURL.
func startBank(ctx context.Context, addr, callbackURL, stateDir string) (*Bank, error) {
	b := &Bank{URL: "http://" + addr, state: filepath.Join(stateDir, "banksim.json")}
	b.args = bankArgs(addr, callbackURL, b.state)
	return b, b.start(ctx)
}

func (b *Bank) start(ctx context.Context) error {
	bin, err := paymentsBinary()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, b.args...)
	cmd.Env = append(os.Environ(), "PAYMENTS_BANK_SECRET="+BankSecret)
	b.log = &lockedBuffer{}
	cmd.Stderr = b.log
	if b.child, err = supervise.Start(cmd); err != nil {
		return err
	}
	err = supervise.WaitReady(ctx, "the bank simulator", time.Minute, 20*time.Millisecond, b.child.Err,
		supervise.HTTPReady(b.URL+"/payments"))
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%w\n%s", err, b.log.String())
	}
	return err
}

// Stop kills the simulator.
func (b *Bank) Stop() {
	if b != nil && b.child != nil {
		_ = b.child.Kill()
	}
}

// Restart kills the simulator (SIGKILL) and starts it again on its state file: what it had
// committed, it still has.
func (b *Bank) Restart(t testing.TB) {
	t.Helper()
	b.Stop()
	if err := b.start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// SetFaults changes the simulator's knobs (docs/bank.md), e.g. {"error_rate": 1}.
func (b *Bank) SetFaults(t testing.TB, knobs map[string]any) {
	t.Helper()
	b.post(t, "/admin/faults", knobs, nil)
}

// Credit makes money arrive at the bank for accountNumber; it returns the bank's event id.
func (b *Bank) Credit(t testing.TB, accountNumber string, amount int64, currency, reference string) string {
	t.Helper()
	var out struct {
		EventID string `json:"event_id"`
	}
	b.post(t, "/admin/credits", map[string]any{"account_number": accountNumber, "amount_minor": amount,
		"currency": currency, "reference": reference}, &out)
	return out.EventID
}

// Resend sends event id again: a duplicate on demand.
func (b *Bank) Resend(t testing.TB, id string) {
	t.Helper()
	b.post(t, "/admin/events/"+id+"/resend", map[string]any{}, nil)
}

// Return sends back a paid payment now.
func (b *Bank) Return(t testing.TB, paymentID, reason string) {
	t.Helper()
	b.post(t, "/admin/payments/"+paymentID+"/return", map[string]any{"reason": reason}, nil)
}

// Statement is every payment the bank holds, as the processor's reconciliation reads it.
func (b *Bank) Statement(t testing.TB) []bank.Payment {
	t.Helper()
	ps, err := (&bank.HTTP{BaseURL: b.URL}).Statement(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// Events is every event the bank made, with its deliveries.
func (b *Bank) Events(t testing.TB) []map[string]any {
	t.Helper()
	var out struct {
		Data []map[string]any `json:"data"`
	}
	b.get(t, "/admin/events", &out)
	return out.Data
}

func (b *Bank) post(t testing.TB, path string, body, out any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := bankClient.Post(b.URL+path, "application/json", bytes.NewReader(raw))
	b.read(t, path, resp, err, out)
}

func (b *Bank) get(t testing.TB, path string, out any) {
	t.Helper()
	resp, err := bankClient.Get(b.URL + path)
	b.read(t, path, resp, err, out)
}

func (b *Bank) read(t testing.TB, path string, resp *http.Response, err error, out any) {
	t.Helper()
	if err != nil {
		t.Fatalf("bank %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("bank %s: %d %s", path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("bank %s: %v: %s", path, err, raw)
		}
	}
}
