package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/ledger"
)

// Balance reads an account's balance from the ledger.
func (e *Env) Balance(t testing.TB, account string) int64 {
	t.Helper()
	acc, err := e.Ledger.Account(context.Background(), "", account)
	if err != nil {
		t.Fatal(err)
	}
	return acc.BalanceMinor
}

// Count runs a count query.
func (e *Env) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Hold locks account against postings until release is called (or t ends). A posting's FOR NO
// KEY UPDATE waits for this one, while claiming a transfer (whose foreign keys take KEY SHARE)
// goes through: a transfer from or to account is claimed, started, and then waits.
func (e *Env) Hold(t testing.TB, account string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.URL) // its own connection: the pool is the system's
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, account); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = conn.Close(ctx) }) } // closing ends the transaction
	t.Cleanup(release)
	return release
}

// Waiting counts the transactions of the test database waiting for a lock, such as postings
// behind Hold.
func (e *Env) Waiting(t testing.TB) int {
	return e.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
}

// CheckLedger reconciles the Env's ledger and returns the report as an error when an invariant
// is broken.
func (e *Env) CheckLedger() error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.URL) // directly, not through a Proxy a test may have cut
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	report, err := ledger.Reconcile(ctx, conn, *e.minTTL)
	if err != nil {
		return err
	}
	if !report.OK() {
		var b bytes.Buffer
		report.Print(&b)
		return errors.New(b.String())
	}
	return nil
}

// Reconcile fails t unless every ledger invariant holds.
func (e *Env) Reconcile(t testing.TB) {
	t.Helper()
	if err := e.CheckLedger(); err != nil {
		t.Fatalf("reconcile:\n%v", err)
	}
}

// Run runs the package's tests on e, then fails the run if they left a ledger that does not
// reconcile, and closes e. TestMain returns its result to os.Exit.
func Run(m *testing.M, e *Env) int {
	code := m.Run()
	if err := e.CheckLedger(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "the tests left a ledger that does not reconcile:\n"+err.Error())
		code = 1
	}
	e.Close()
	return code
}
