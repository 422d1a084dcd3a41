package transfers

import (
	"context"
	"errors"
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
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/rig/testenv/testdb"
	"github.com/payments/payments/workflows"
)

// ledgerForTest is a migrated database of this test process's own, on the tests' PostgreSQL
// (TEST_DATABASE_URL), dropped at the end. (The package cannot use rig/testenv, which
// imports it.)
func ledgerForTest(t *testing.T) *ledger.Ledger {
	ctx := context.Background()
	name := fmt.Sprintf("payments_test_transfers_%d", os.Getpid())
	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		t.Fatalf("PostgreSQL at %s is needed (set %s): %v", testdb.AdminURL(), testdb.Variable, err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		t.Fatal(err)
	}
	url, err := testdb.URL(name)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, url)
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

// answer stands in for the API's answer to a final transfer.
func answer(t ledger.Transfer) idempotency.Response {
	status := http.StatusCreated
	if t.Status == ledger.TransferRejected {
		status = http.StatusUnprocessableEntity
	}
	return idempotency.Response{Status: status, ContentType: "application/json", Body: []byte(`{"id":"` + t.ID + `"}`)}
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
	from, _ := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), ownerID, "USD", "", nil)
	to, _ := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), ownerID, "USD", "", nil)
	s := &Service{Runner: &operation.Runner{Claims: l}, Ledger: l, TTL: time.Hour, Answer: answer}
	deposit := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteDeposit, Key: "d"}
	if _, _, err := l.Post(ctx, ledger.Posting{TransferID: deposit.TransferID(0), WorkflowID: deposit.WorkflowID(),
		From: money.FundingAccountID("USD"), To: from.ID, AmountMinor: 100, Currency: "USD", Scope: deposit}, answer); err != nil {
		t.Fatal(err)
	}

	req := Request{Scope: idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: "k"},
		Fingerprint: []byte("fp"), From: from.ID, To: to.ID, AmountMinor: 40, Currency: "USD"}
	var in workflows.TransferInput
	claimed, err := s.Runner.Claim(ctx, s.claim(req, &in))
	if err != nil || !claimed.Created {
		t.Fatalf("claim: %v %v", claimed.Created, err)
	}
	waitRanOut := context.DeadlineExceeded
	pending, err := s.afterWait(ctx, in, nil, Answer{}, true, waitRanOut)
	if err != nil || pending.Pending == nil || pending.Pending.Status != ledger.TransferPending {
		t.Fatalf("while pending: %+v %v", pending, err)
	}
	// A run that gave up meanwhile: the ledger says failed, and so does the answer, never a 202
	// for a transfer nothing is running.
	if _, err := l.MarkFailed(ctx, in.TransferID, "run-1", "gave up"); err != nil {
		t.Fatal(err)
	}
	var failed *FailedError
	if gaveUp, err := s.afterWait(ctx, in, nil, Answer{}, true, waitRanOut); !errors.As(err, &failed) || gaveUp.Pending != nil {
		t.Fatalf("after its run gave up: %+v %v; want a FailedError", gaveUp, err)
	}
	_, stored, err := l.Post(ctx, in.Posting, answer)
	if err != nil {
		t.Fatal(err)
	}
	final, err := s.afterWait(ctx, in, nil, Answer{}, true, waitRanOut)
	if err != nil || final.Pending != nil || final.Status != http.StatusCreated || string(final.Body) != string(stored.Body) {
		t.Fatalf("once posted: %+v %v; want the stored %d %s", final, err, stored.Status, stored.Body)
	}
	if acc, err := l.Account(ctx, "", from.ID); err != nil || acc.BalanceMinor != 60 {
		t.Fatalf("source after the posting: %+v %v; want 60 left", acc, err)
	}
}
