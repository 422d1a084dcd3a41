package transfers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
)

// ledgerForTest is a migrated database of this test process's own, dropped at the end. (The
// package cannot use internal/testenv, which imports it.)
func ledgerForTest(t *testing.T) *ledger.Ledger {
	ctx := context.Background()
	name := fmt.Sprintf("payments_test_transfers_%d", os.Getpid())
	admin, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	if err != nil {
		t.Skipf("no PostgreSQL: %v", err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, "postgres://postgres@127.0.0.1:5432/"+name+"?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		_ = admin.Close(ctx)
	})
	if err := database.Migrate(ctx, pool, io.Discard); err != nil {
		t.Fatal(err)
	}
	return &ledger.Ledger{DB: pool}
}

// A wait that timed out just as the posting committed reads the transfer final: the answer is
// then its final answer, never a 202 "pending" for a transfer that is not.
func TestPendingAnswerOfAFinishedTransferIsItsFinalAnswer(t *testing.T) {
	ctx := context.Background()
	l := ledgerForTest(t)
	ownerID, err := auth.EnsureOwner(ctx, l.DB, "alice")
	if err != nil {
		t.Fatal(err)
	}
	from, _ := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), ownerID, "USD", "")
	to, _ := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), ownerID, "USD", "")
	s := &Service{Ledger: l, TTL: time.Hour}
	deposit := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteDeposit, Key: "d"}
	if _, _, err := l.Post(ctx, ledger.Posting{TransferID: deposit.TransferID(0), WorkflowID: deposit.WorkflowID(),
		From: money.FundingAccountID("USD"), To: from.ID, AmountMinor: 100, Currency: "USD", Scope: deposit}); err != nil {
		t.Fatal(err)
	}

	req := Request{Scope: idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: "k"},
		Fingerprint: []byte("fp"), From: from.ID, To: to.ID, AmountMinor: 40, Currency: "USD"}
	in, rec, created, err := s.claim(ctx, req)
	if err != nil || !created {
		t.Fatalf("claim: %v %v", created, err)
	}
	pending, err := s.pending(ctx, in, rec.CreatedAt, Answer{})
	if err != nil || pending.Status != http.StatusAccepted {
		t.Fatalf("while pending: %d %v", pending.Status, err)
	}
	_, stored, err := l.Post(ctx, in.Posting())
	if err != nil {
		t.Fatal(err)
	}
	final, err := s.pending(ctx, in, rec.CreatedAt, Answer{})
	if err != nil || final.Status != http.StatusCreated || string(final.Body) != string(stored.Body) {
		t.Fatalf("once posted: %d %s %v; want the stored %d %s", final.Status, final.Body, err, stored.Status, stored.Body)
	}
}
