package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/database"
)

// Every session of the pool has the timeouts of contract §10, unless DATABASE_URL sets its own.
func TestSessionsHaveTimeouts(t *testing.T) {
	ctx := context.Background()
	for name, want := range map[string]string{"idle_in_transaction_session_timeout": "30s", "lock_timeout": "10s"} {
		var got string
		if err := l.DB.QueryRow(ctx, "SHOW "+name).Scan(&got); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
}

// A client that stalls inside a transaction holding an account's lock is cut off by
// PostgreSQL, and a posting on that account goes through instead of waiting for it: here with
// the idle timeout shortened through DATABASE_URL, as an operator may.
func TestAStalledTransactionLosesItsLocks(t *testing.T) {
	ctx := context.Background()
	stalled, err := database.Open(ctx, dbURL+"&idle_in_transaction_session_timeout=300ms")
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	tx, err := stalled.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, a); err != nil {
		t.Fatal(err)
	}
	// The stalled client does nothing more; the posting waits for its lock, well short of the
	// lock timeout (10 s), because the stalled session is ended first.
	postCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p := posting(a, b, 300)
	if _, _, err := l.Post(postCtx, p, api.TransferAnswer); err != nil {
		t.Fatalf("the posting behind a stalled transaction: %v", err)
	}
	if balance(t, a) != 700 || balance(t, b) != 300 || entries(t, p.TransferID) != 2 {
		t.Fatalf("balances %d/%d entries %d", balance(t, a), balance(t, b), entries(t, p.TransferID))
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the stalled transaction committed after its session was ended")
	}
}
