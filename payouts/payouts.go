// Package payouts submits payouts (money out through the bank) and delivers the bank's payment
// callbacks to their runs. A payout runs as the workflow payout/<owner>/<key>; its first answer
// (201 processing, or 422 insufficient-funds) is stored when its money is held.
package payouts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// Service submits payouts: an instance of the operation lifecycle (operation.Runner).
type Service struct {
	Runner       *operation.Runner
	Ledger       *ledger.Ledger
	TTL          time.Duration // how long the first answer is replayed
	RetryFor     time.Duration // how long holding the money retries technical failures
	BankRetryFor time.Duration // how long a run keeps giving the bank its instruction
	PollAfter    time.Duration // how long a run waits for a callback before asking the bank
	ReturnWindow time.Duration // how long after paid a return is awaited
	Approvals    config.Approvals
	Answer       ledger.ApprovalAnswer // the answers of approvals and rejections (api.ApprovalAnswer)
}

// Request is a payout whose account and currency the caller has already checked.
type Request struct {
	Scope       idempotency.Scope
	Fingerprint []byte
	AccountID   string
	AmountMinor int64
	Currency    string
	Destination bank.Destination
	Description string
	Metadata    map[string]string
	KeyID       string // the key asking: it cannot approve the payout
}

// Answer is how a submission ended: the first answer as stored, or, when the money is not held
// yet after the wait, the payout (Pending).
type Answer = operation.Answer[ledger.Payout]

// deliverTimeout bounds how long a bank callback waits for the payout's run to take it.
const deliverTimeout = 10 * time.Second

// memoPayoutID names the memo field holding the payout a run makes.
const memoPayoutID = "payout_id"

// Submit runs the payout once per scope and waits for its first answer, stored when the run holds
// the money (its result, days later, is no answer to wait for). The error is ErrReused, an
// *operation.InUseError, an outage or a refused value; the claim and start do not follow ctx.
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	var in workflows.PayoutInput
	return operation.SubmitStored(ctx, s.Runner, s.Ledger.DB, s.claim(r, &in), workflows.AnswerUpdate, func() operation.Stored[ledger.Payout] {
		return operation.Stored[ledger.Payout]{Op: s.operation(in), Scope: in.Scope,
			Pending: func(ctx context.Context) (ledger.Payout, error) { return s.Ledger.Payout(ctx, "", in.PayoutID) },
			InUse:   &operation.InUseError{Kind: operation.KindPayout, ID: in.PayoutID, WorkflowID: in.WorkflowID}}
	})
}

// claim claims r's payout (in is its run's input once claimed); its row is the payout,
// processing. Whether it waits for approval, and until when, is fixed here, in its row: a
// duplicate, a re-run and the recovery pass run it as claimed, whatever the threshold is then.
func (s *Service) claim(r Request, in *workflows.PayoutInput) operation.Claim {
	return operation.Claim{Scope: r.Scope, Fingerprint: r.Fingerprint, Uses: ledger.PayoutsUnder, NewID: r.Scope.PayoutID,
		Then: func(ctx context.Context, tx pgx.Tx, c operation.Claimed) error {
			po := ledger.Payout{ID: c.ID, AccountID: r.AccountID, AmountMinor: r.AmountMinor, Currency: r.Currency,
				Destination: r.Destination, Description: r.Description, WorkflowID: c.WorkflowID, Metadata: r.Metadata,
				CreatedByKey: r.KeyID}
			var err error
			if c.Created {
				po, err = ledger.InsertPayout(ctx, tx, po, s.approvalFor(r.AmountMinor))
			} else if claimed, cerr := ledger.ClaimedPayout(ctx, tx, c.ID); cerr == nil {
				po = claimed
			} else if !errors.Is(cerr, ledger.ErrNotFound) {
				err = cerr
			}
			*in = s.input(r.Scope, po)
			return err
		}}
}

// approvalFor is how long a payout of amount waits for approval: PAYMENTS_APPROVAL_TIMEOUT at or
// above PAYMENTS_APPROVAL_THRESHOLD_MINOR, 0 (no approval) below it or when it is not set.
func (s *Service) approvalFor(amount int64) time.Duration {
	if s.Approvals.ThresholdMinor <= 0 || amount < s.Approvals.ThresholdMinor {
		return 0
	}
	return s.Approvals.Timeout
}

func (s *Service) input(scope idempotency.Scope, po ledger.Payout) workflows.PayoutInput {
	in := workflows.PayoutInput{
		PayoutHold: ledger.PayoutHold{PayoutID: po.ID, Scope: scope, ReplayFor: config.Duration(s.TTL)},
		WorkflowID: po.WorkflowID, AccountID: po.AccountID, AmountMinor: po.AmountMinor, Currency: po.Currency,
		Destination: po.Destination, Description: po.Description, Metadata: po.Metadata,
		RetryFor: config.Duration(s.RetryFor), BankRetryFor: config.Duration(s.BankRetryFor),
		PollAfter: config.Duration(s.PollAfter), ReturnWindow: config.Duration(s.ReturnWindow),
	}
	if po.ApprovalDueAt != nil {
		in.Approval = &workflows.ApprovalWindow{Since: po.CreatedAt, Until: *po.ApprovalDueAt, AskedBy: po.CreatedByKey}
	}
	return in
}

// Decide approves or rejects payout po (as d says, under d's scope): an Update of its run,
// decided by the ledger; once the run has closed, the ledger answers directly (the payout is not
// waiting for approval: 422). The answer is stored under d's scope either way.
func (s *Service) Decide(ctx context.Context, po ledger.Payout, d ledger.Approval, fingerprint []byte) (idempotency.Response, bool, error) {
	d.PayoutID, d.ReplayFor = po.ID, config.Duration(s.TTL)
	return s.Runner.Decide(ctx, operation.Decision{
		Scope: d.Scope, Fingerprint: fingerprint, Kind: operation.KindPayout, ID: po.ID, WorkflowID: po.WorkflowID,
		Update: workflows.ApprovalUpdate, Arg: d, OtherRun: workflows.ErrTypeOtherPayout,
		Closed: func(ctx context.Context) (idempotency.Response, error) {
			_, resp, err := s.Ledger.DecideApproval(ctx, d, s.Answer)
			return resp, err
		},
	})
}

// operation is in's run: a completed payout is never repeated; a failed run (the bank down past
// BankRetryFor) may run again, and asks the bank again under the same key.
func (s *Service) operation(in workflows.PayoutInput) operation.Operation {
	return s.Runner.Operation(operation.Run{Kind: operation.KindPayout, Workflow: workflows.Payout, MemoKey: memoPayoutID, ID: in.PayoutID,
		Scope: in.Scope, Input: in, Attributes: workflows.PayoutSearchAttributes(in), Summary: workflows.PayoutSummary(in),
		Memo: workflows.MetadataMemo(in.Metadata)})
}

// Deliver hands a verified bank event to the run of the payout it names, as an Update whose ID is
// the event's, so that it is applied once, and returns what became of it, for the record. An
// error is Temporal unreachable: the bank is told so and sends it again.
func (s *Service) Deliver(ctx context.Context, e bank.Event) (string, error) {
	po, err := s.Ledger.Payout(ctx, "", e.Data.Reference)
	if errors.Is(err, ledger.ErrNotFound) {
		return "unmatched", nil
	}
	if err != nil {
		return "", database.Outage(err)
	}
	if e.Data.PaymentID == "" { // no telling which payment it is about: nothing to apply
		return "rejected: the event names no payment", nil
	}
	if po.BankPaymentID != nil && *po.BankPaymentID != e.Data.PaymentID {
		// A second payment for one payout: not applied; reconcile (invariant 8) shows it.
		return fmt.Sprintf("rejected: payment %s is not the payout's payment %s", e.Data.PaymentID, *po.BankPaymentID), nil
	}
	// Before the payout records its bank payment, only the run can tell whether the event is about
	// it, once the bank has answered (workflows.Payout's receive): asking the bank here would make
	// callbacks depend on its rail API. The deadline: a run no worker polls must not hold the
	// bank's request for ever; answered 503, the bank sends the event again.
	ctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	defer cancel()
	h, err := s.Runner.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: po.WorkflowID, UpdateID: e.ID, UpdateName: workflows.BankEventUpdate,
		Args: []any{workflows.BankEvent{ID: e.ID, Type: e.Type, PaymentID: e.Data.PaymentID,
			Reference: e.Data.Reference, Reason: e.Data.Reason}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var closed *serviceerror.NotFound // the workflow has no open run to take it
	var refused *temporal.ApplicationError
	switch {
	case err == nil && po.BankPaymentID == nil:
		return "delivered: the run applies it once the bank confirms it is about the payout's payment", nil
	case err == nil:
		return "delivered", nil
	case errors.As(err, &closed) || errors.As(err, &refused) && refused.Type() == workflows.ErrTypeOtherPayout:
		// Closed, or the workflow ID's latest run is a later use's of the key: the payout's own
		// run has ended.
		return s.late(ctx, e, po)
	case errors.As(err, &refused): // the run's validator refused it
		return fmt.Sprintf("rejected: %v", err), nil
	}
	return "", operation.TemporalError(err) // an outage answers 503, anything else 500: the bank sends it again
}

// late applies an event whose payout has no run going: a return of a paid payout's payment after
// its window still brings the money back (once, ledger.ReturnPayout). Anything else is only
// recorded: a payout still processing is run again by the recovery pass, which asks the bank.
func (s *Service) late(ctx context.Context, e bank.Event, po ledger.Payout) (string, error) {
	if e.Type != bank.PaymentReturned || po.Status != ledger.PayoutPaid || po.BankPaymentID == nil {
		return "late", nil
	}
	if _, err := s.Ledger.ReturnPayout(ctx, po.ID, e.Data.Reason); err != nil {
		return "", database.Outage(err)
	}
	return "returned after the return window", nil
}

// RerunFailed starts again, with the same input, the payout workflows whose latest run failed,
// was terminated or timed out: a rerun holds nothing twice and asks the bank under the same key.
// A payout's run lasts until its return window closes, so the report says only that it started.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	decode := func(input func(any) error) (operation.Operation, error) {
		var in workflows.PayoutInput
		err := input(&in)
		return s.operation(in), err
	}
	return operation.RerunFailed(ctx, s.Runner.Client, s.Runner.Converter, "Payout", since, decode, nil, report)
}

// ResolveStale makes sure every payout still processing olderThan after its claim has a run going,
// so that no money stays held for ever (operation.ResolveWaiting). A run that ended Canceled is
// started again too: a run cancels only after releasing the hold, so one still processing was
// canceled by an older build, perhaps after reaching the bank; its new run asks the bank under
// the same key.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (operation.Tally, error) {
	return operation.ResolveWaiting(ctx, s.Runner.Client, s.Ledger.DB, "Payout", processingRuns,
		func(f func([]ledger.Payout) error) error { return s.Ledger.Processing(ctx, olderThan, f) },
		func(po ledger.Payout) (string, string, string) {
			return fmt.Sprintf("payout %s (%s)", po.ID, po.WorkflowID), po.WorkflowID, po.ID
		},
		func(po ledger.Payout, scope idempotency.Scope) operation.Operation {
			return s.operation(s.input(scope, po))
		})
}

// processingRuns admits the payout runs that have not heard the bank's outcome yet: those
// whose payouts are still processing.
var processingRuns = fmt.Sprintf("PayoutStatus IN ('%s', '%s', '%s', '%s', '%s')",
	ledger.PayoutHolding, ledger.PayoutPendingApproval, ledger.PayoutSending, ledger.PayoutAwaitingBank, ledger.PayoutBankMismatch)
