package ledger_test

import (
	"context"
	"testing"
)

// Every session of the pool has the timeouts of contract §10, unless DATABASE_URL sets its own.
// What they do for a transfer behind a stalled transaction: api's
// TestATransferIsNotHeldByAStalledTransaction.
func TestSessionsHaveTimeouts(t *testing.T) {
	ctx := context.Background()
	for name, want := range map[string]string{"idle_in_transaction_session_timeout": "30s", "lock_timeout": "10s"} {
		var got string
		if err := l.DB.QueryRow(ctx, "SHOW "+name).Scan(&got); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
}
