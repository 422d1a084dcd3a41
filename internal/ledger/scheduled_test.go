package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// scheduled makes a scheduled transfer of amount from a to b, count times a second apart,
// activated (its 201 stored under its scope) with its first occurrence started and posted, as
// its run would.
func scheduled(t *testing.T, a, b string, amount int64, count int) (ledger.ScheduledTransfer, ledger.Posting) {
	t.Helper()
	ctx := context.Background()
	from, err := l.Account(ctx, "", a)
	if err != nil {
		t.Fatal(err)
	}
	scope := idempotency.Scope{OwnerID: from.OwnerID, Route: idempotency.RouteScheduledTransfers, Key: ledger.NewID("k")}
	interval := "1s"
	st := ledger.ScheduledTransfer{ID: scope.ScheduledTransferID(0), OwnerID: from.OwnerID, FromAccountID: a, ToAccountID: b,
		AmountMinor: amount, Currency: "USD", StartAt: time.Now().UTC(), Interval: &interval, IntervalMS: 1000, Count: &count,
		WorkflowID: scope.WorkflowID()}
	if err := l.InTx(ctx, func(tx pgx.Tx) error {
		if _, _, err := idempotency.Claim(ctx, tx, scope, []byte{1}, st.ID); err != nil {
			return err
		}
		return ledger.InsertScheduledTransfer(ctx, tx, st)
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.ActivateScheduledTransfer(ctx, st.ID, scope, 0, api.ScheduledTransferAnswer); err != nil {
		t.Fatal(err)
	}
	if _, begun, err := l.BeginOccurrence(ctx, st.ID, 1); err != nil || !begun {
		t.Fatalf("occurrence 1: %v %v", begun, err)
	}
	occ := idempotency.OccurrenceScope(from.OwnerID, st.ID, 1)
	p := ledger.Posting{TransferID: occ.TransferID(0), WorkflowID: occ.WorkflowID(), From: a, To: b, AmountMinor: amount,
		Currency: "USD", ScheduledTransferID: st.ID, Occurrence: 1}
	if _, _, err := l.Post(ctx, p, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	return st, p
}

// Invariant 12 broken on purpose: an occurrence that is two transfers, one beyond those started
// (after a cancellation stopped the schedule), one of another amount, a schedule completed
// before its last occurrence, an answer about a schedule that says otherwise; a cancellation
// and an occurrence racing are decided once.
func TestReconcileFindsBrokenScheduledTransfers(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	st, p := scheduled(t, a, b, 100, 3)
	if _, err := l.CancelScheduledTransfer(ctx, st.OwnerID, st.ID); err != nil {
		t.Fatal(err)
	}
	if _, begun, err := l.BeginOccurrence(ctx, st.ID, 2); err != nil || begun {
		t.Fatalf("occurrence 2 after the cancellation: begun %v, %v", begun, err)
	}
	if _, begun, err := l.BeginOccurrence(ctx, st.ID, 1); err != nil || !begun {
		t.Fatalf("occurrence 1 fired again after the cancellation: begun %v, %v", begun, err)
	}
	second := idempotency.OccurrenceScope(st.OwnerID, st.ID, 2)
	breakEach(t, nil, nil, []breakage{
		{"an occurrence that is two transfers", "12: has 2 transfers", false,
			[]string{`DROP INDEX transfers_occurrence`,
				`INSERT INTO transfers (id, status, from_account_id, to_account_id, amount_minor, currency, workflow_id, kind, scheduled_transfer_id, occurrence)
				VALUES ('tr_again', 'rejected', '` + a + `', '` + b + `', 100, 'USD', '` + p.WorkflowID + `', 'transfer', '` + st.ID + `', 1)`}},
		{"an occurrence after the cancellation", "12: is occurrence 2", false,
			[]string{`INSERT INTO transfers (id, status, from_account_id, to_account_id, amount_minor, currency, workflow_id, kind, scheduled_transfer_id, occurrence)
				VALUES ('` + second.TransferID(0) + `', 'rejected', '` + a + `', '` + b + `', 100, 'USD', '` + second.WorkflowID() + `', 'transfer', '` + st.ID + `', 2)`}},
		{"an occurrence of another amount", "12: is occurrence 1", false,
			[]string{`UPDATE transfers SET amount_minor = 99 WHERE id = '` + p.TransferID + `'`}},
		{"a schedule completed before its last occurrence", "12: is completed after 1 of 3", false,
			[]string{`UPDATE scheduled_transfers SET status = 'completed', completed_at = now(), cancelled_at = NULL WHERE id = '` + st.ID + `'`}},
		{"an answer naming another schedule", "12: answers 201", true,
			[]string{`UPDATE idempotency_records SET body = convert_to('{"id":"st_other"}', 'UTF8') WHERE resource_id = '` + st.ID + `'`}},
		{"a transfer under an occurrence's workflow ID that names no schedule", "12: names no scheduled transfer", false,
			[]string{`UPDATE transfers SET scheduled_transfer_id = NULL, occurrence = NULL WHERE id = '` + p.TransferID + `'`}},
	})
}
