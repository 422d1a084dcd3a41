// Package payouts submits payouts (money out through the bank) and delivers the bank's payment
// callbacks to their runs; package payins receives the bank's credits. A payout is claimed
// under its idempotency scope and run as the workflow payout/<owner>/<key>; its first answer
// (201 processing, or 422 insufficient-funds) is stored when its money is held.
package payouts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/enums/v1"
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
}

// Answer is how a submission ended: the first answer as stored, or, when the money is not held
// yet after the wait, the payout (Pending).
type Answer = operation.Answer[ledger.Payout]

// deliverTimeout bounds how long a bank callback waits for the payout's run to take it.
const deliverTimeout = 10 * time.Second

// memoPayoutID names the memo field holding the payout a run makes.
const memoPayoutID = "payout_id"

// Submit runs the payout once per scope: claims it, starts its run (or finds it), and waits for
// its first answer, which the run stores when it holds the money: heard in this process, asked
// of the run by Update where this process has no worker (operation.Submit), or read from the ledger
// (a payout's run goes on for days, so its result is no answer to wait for). The error, when not
// nil, is idempotency.ErrReused, an *operation.InUseError, an outage, or PostgreSQL's refusal
// of a value. Like a transfer's, the claim and the start do not follow the client's context.
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	var in workflows.PayoutInput
	return operation.Submit(ctx, s.Runner, s.claim(r, &in), func(sub *operation.Submission, answer Answer) operation.Ending[ledger.Payout, idempotency.Response] {
		return operation.Ending[ledger.Payout, idempotency.Response]{
			Op: s.operation(in), Update: workflows.AnswerUpdate,
			Asked: func(resp idempotency.Response, _ string) (Answer, error) {
				answer.Response = resp
				return answer, nil
			},
			Await: func(waitCtx context.Context, _ client.WorkflowRun) (Answer, error) {
				return s.await(ctx, waitCtx, sub, in, answer)
			},
		}
	})
}

// await answers with the payout's first answer, from this process or the ledger, while waitCtx
// lasts; when it has not come, with 202 (the payout as it stands) to the first request, or
// idempotency-key-in-use to a duplicate, unless the client (ctx) has gone.
func (s *Service) await(ctx, waitCtx context.Context, sub *operation.Submission, in workflows.PayoutInput, answer Answer) (Answer, error) {
	resp, err := operation.WaitStored(waitCtx, s.Runner, s.Ledger.DB, in.Scope, sub)
	switch {
	case err == nil:
		answer.Response = resp
		return answer, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		po, err := s.Ledger.Payout(ctx, "", in.PayoutID)
		if err != nil {
			return answer, database.Outage(err)
		}
		if sub.Created {
			answer.Pending = &po // 202: accepted, its money not held yet
			return answer, nil
		}
		return answer, &operation.InUseError{Kind: operation.KindPayout, ID: in.PayoutID, WorkflowID: in.WorkflowID}
	default:
		return answer, database.Outage(err)
	}
}

// claim claims r's payout (in is its run's input once claimed): the payout, processing, is its
// row.
func (s *Service) claim(r Request, in *workflows.PayoutInput) operation.Claim {
	return operation.Claim{Scope: r.Scope, Fingerprint: r.Fingerprint, Uses: ledger.PayoutsUnder, NewID: r.Scope.PayoutID,
		Then: func(ctx context.Context, tx pgx.Tx, c operation.Claimed) error {
			if *in = s.input(r, c.ID, c.WorkflowID); !c.Created {
				return nil
			}
			return ledger.InsertPayout(ctx, tx, ledger.Payout{ID: in.PayoutID, AccountID: in.AccountID, AmountMinor: in.AmountMinor,
				Currency: in.Currency, Destination: in.Destination, Description: in.Description, WorkflowID: in.WorkflowID,
				Metadata: in.Metadata})
		}}
}

func (s *Service) input(r Request, payoutID, workflowID string) workflows.PayoutInput {
	return workflows.PayoutInput{
		PayoutHold: ledger.PayoutHold{PayoutID: payoutID, Scope: r.Scope, ReplayFor: config.Duration(s.TTL)},
		WorkflowID: workflowID, AccountID: r.AccountID, AmountMinor: r.AmountMinor, Currency: r.Currency,
		Destination: r.Destination, Description: r.Description, Metadata: r.Metadata,
		RetryFor: config.Duration(s.RetryFor), BankRetryFor: config.Duration(s.BankRetryFor),
		PollAfter: config.Duration(s.PollAfter), ReturnWindow: config.Duration(s.ReturnWindow),
	}
}

// operation is in's run: a payout that completed (paid, failed, returned) is never repeated; a
// run that failed (the bank down for longer than BankRetryFor) may be run again, and asks the
// bank again under the same key.
func (s *Service) operation(in workflows.PayoutInput) operation.Operation {
	return s.Runner.Operation(operation.Run{Kind: operation.KindPayout, Workflow: workflows.Payout, MemoKey: memoPayoutID, ID: in.PayoutID,
		Scope: in.Scope, Input: in, Attributes: workflows.PayoutSearchAttributes(in), Summary: workflows.PayoutSummary(in),
		Memo: workflows.MetadataMemo(in.Metadata)})
}

// Deliver hands a verified bank event about a payment to the run of the payout it names, as an
// Update whose ID is the event's id: delivered twice, it is applied once. It returns what became
// of it, for the record: delivered; unmatched (no such payout); late (the payout's run has
// ended, and the workflow ID may hold a later use's run: a return after its window, or an event
// the run no longer waits for); rejected (the run refused it). An error is Temporal unreachable: the bank is answered so, and sends it again.
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
	// Before the payout records its bank payment, the edge cannot tell: the run can, once the
	// bank has answered its instruction (or a question). It holds the event until then, applies
	// it if it is about that payment, and drops it if not (workflows.Payout's receive). Asking the
	// bank here instead would make taking a callback depend on the bank's rail API being up.
	// A run that takes no Update (no worker polls) must not hold the bank's request for ever:
	// answered 503 at the deadline, the bank sends the event again.
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
	case errors.As(err, &closed):
		return s.late(ctx, e, po)
	case errors.As(err, &refused) && refused.Type() == workflows.ErrTypeOtherPayout:
		// The workflow ID's latest run is a later use's of the key: the payout's own run has
		// ended, as for a closed one.
		return s.late(ctx, e, po)
	case errors.As(err, &refused): // the run's validator refused it
		return fmt.Sprintf("rejected: %v", err), nil
	}
	return "", operation.TemporalError(err) // an outage answers 503, anything else 500: the bank sends it again
}

// late applies an event whose payout has no run going. A return after the window of a paid
// payout (of the payment it records: Deliver checked the id) still brings the money back: it is
// credited (once, ledger.ReturnPayout; the statement Schedule, workflows.CreditBankReturns,
// credits one whose callback is lost). Anything else
// is only recorded: a payout still processing is run again by the recovery pass, which asks
// the bank itself.
func (s *Service) late(ctx context.Context, e bank.Event, po ledger.Payout) (string, error) {
	if e.Type != bank.PaymentReturned || po.Status != ledger.PayoutPaid || po.BankPaymentID == nil {
		return "late", nil
	}
	if _, err := s.Ledger.ReturnPayout(ctx, po.ID, e.Data.Reason); err != nil {
		return "", database.Outage(err)
	}
	return "returned after the return window", nil
}

// RerunFailed finds the payout workflows whose latest run failed (the bank did not answer for
// BankRetryFor, the ledger could not take the outcome), was terminated or timed out,
// and starts each again with the same input: it holds nothing twice (the hold is kept), asks the
// bank under the same key (one payment), and carries on. A payout's run lasts until its return
// window closes, so the report says it started; its status shows how it goes on.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	decode := func(input func(any) error) (operation.Operation, error) {
		var in workflows.PayoutInput
		err := input(&in)
		return s.operation(in), err
	}
	return operation.RerunFailed(ctx, s.Runner.Client, s.Runner.Converter, "Payout", since, decode, nil, report)
}

// ResolveStale makes sure every payout still processing olderThan after its claim has a run
// going, so that no money stays held, and no claim stays unsent, for ever: a payout with no run
// (the API died between the claim and the start), or whose run failed or timed out (the bank
// did not answer for BankRetryFor, the ledger could not take the outcome), is started again. Its
// new run holds nothing twice and asks the bank under the same key (afterRun says which closed
// runs are started again). The runs going are read from Temporal's visibility first, in a few pages, those
// still before the bank's outcome only, so that the payouts legitimately waiting on the bank,
// however many, cost nothing each; visibility lags a little, and a payout it misses is
// described before it is started. One payout that cannot be resolved now does not hold up the
// others.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (operation.Tally, error) {
	var res operation.Tally
	going := map[string]bool{}
	err := operation.EachRunning(ctx, s.Runner.Client, "Payout", processingRuns, func(workflowID string) { going[workflowID] = true })
	if err != nil {
		return res, err
	}
	err = s.Ledger.Processing(ctx, olderThan, func(page []ledger.Payout) error {
		for _, po := range page {
			outcome, err := operation.Running, error(nil)
			if !going[po.WorkflowID] {
				outcome, err = s.restart(ctx, po)
			}
			res.Note(fmt.Sprintf("payout %s (%s)", po.ID, po.WorkflowID), outcome, err)
		}
		return nil
	})
	return res, res.Err(err)
}

// processingRuns admits the payout runs that have not heard the bank's outcome yet: those
// whose payouts are still processing.
var processingRuns = fmt.Sprintf("PayoutStatus IN ('%s', '%s', '%s', '%s')",
	ledger.PayoutHolding, ledger.PayoutSending, ledger.PayoutAwaitingBank, ledger.PayoutBankMismatch)

// restart starts payout po's run again unless one is going or an operator stopped the last one,
// and says which: started, running, stopped, withdrawn (the claim, refused while an earlier use
// of its key still runs) or skipped (under no idempotency scope).
func (s *Service) restart(ctx context.Context, po ledger.Payout) (operation.Outcome, error) {
	op := func(scope idempotency.Scope) operation.Operation {
		return s.operation(s.input(Request{Scope: scope, AccountID: po.AccountID, AmountMinor: po.AmountMinor, Currency: po.Currency,
			Destination: po.Destination, Description: po.Description, Metadata: po.Metadata}, po.ID, po.WorkflowID))
	}
	return operation.Resolve(ctx, s.Ledger.DB, po.WorkflowID, po.ID, op, func(run operation.Classified) (operation.Outcome, error) {
		return afterRun(run), nil
	})
}

// afterRun is what the recovery pass does with a payout still processing whose run has closed:
// a run an operator terminated is theirs to decide on (`payments rerun failed`): Stopped,
// counted, not restarted. Any other is started again (""), so that its money is not held for
// ever: one that failed or timed out, and one that ended Canceled, which a run does only after
// releasing the hold (cancel-before-the-bank), so one still processing was canceled by a build
// before that rule, perhaps after its instruction reached the bank: its new run asks the bank
// under the same key and settles as the bank says.
func afterRun(run operation.Classified) operation.Outcome {
	if run.Status == enums.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		return operation.Stopped
	}
	return ""
}
