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

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// Service submits payouts.
type Service struct {
	Ledger       *ledger.Ledger
	Temporal     client.Client
	SyncWait     time.Duration // how long Submit waits for the first answer
	TTL          time.Duration // how long the first answer is replayed
	RetryFor     time.Duration // how long holding the money retries technical failures
	BankRetryFor time.Duration // how long a run keeps giving the bank its instruction
	PollAfter    time.Duration // how long a run waits for a callback before asking the bank
	ReturnWindow time.Duration // how long after paid a return is awaited
	Eager        bool          // start runs on the worker in this process
	Listener     *operation.Listener
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

// Answer is how a submission ended: the first answer as stored (Response), or, when the money
// is not held yet after the wait, the payout (Pending). Replayed is true when an earlier request
// with the same key started the payout.
type Answer struct {
	idempotency.Response
	Pending  *ledger.Payout
	Replayed bool
	PayoutID string
}

// deliverTimeout bounds how long a bank callback waits for the payout's run to take it.
const deliverTimeout = 10 * time.Second

// memoPayoutID names the memo field holding the payout a run makes.
const memoPayoutID = "payout_id"

// Submit runs the payout once per scope: claims it, starts its run (or finds it), and waits for
// its first answer, stored when the run holds the money. The error, when not nil, is
// idempotency.ErrReused, a *operation.InUseError, an outage, or PostgreSQL's refusal of a value.
// Like a transfer's, the claim and the start do not follow the client's context.
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.SyncWait, 5*time.Second))
	defer cancel()
	in, rec, created, err := s.claim(startCtx, r)
	if err != nil {
		return Answer{}, database.Outage(err)
	}
	answer := Answer{PayoutID: in.PayoutID, Replayed: !created}
	if rec.Response != nil {
		answer.Response = *rec.Response
		return answer, nil
	}
	var held <-chan idempotency.Response
	if s.Listener != nil {
		var stop func()
		held, stop = s.Listener.Listen(in.PayoutID)
		defer stop()
	}
	if _, err := s.operation(in).Start(startCtx); err != nil {
		return answer, err
	}
	grace := time.Duration(0)
	if created {
		grace = localGrace
	}
	resp, err := s.wait(ctx, in, held, grace)
	switch {
	case err == nil:
		answer.Response = resp
		return answer, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		po, err := s.Ledger.Payout(ctx, "", in.PayoutID)
		if err != nil {
			return answer, database.Outage(err)
		}
		if created {
			answer.Pending = &po // 202: accepted, its money not held yet
			return answer, nil
		}
		return answer, &operation.InUseError{ID: in.PayoutID, WorkflowID: in.WorkflowID}
	default:
		return answer, database.Outage(err)
	}
}

// wait returns the first answer of the payout, from the worker in this process if it holds the
// money here (held), or from the ledger, where it is stored, for at most SyncWait. The request
// that started the payout listens only for localGrace (its run nearly always holds the money
// here, within milliseconds, eager start) before it reads the ledger too; a duplicate reads it
// at once (the hold it waits for may have been stored before it began to listen). The reads
// back off from 20 ms to 200 ms. A payout's run goes on for days, so its result is no answer
// to wait for.
func (s *Service) wait(ctx context.Context, in workflows.PayoutInput, held <-chan idempotency.Response, grace time.Duration) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, s.SyncWait)
	defer cancel()
	if held == nil {
		grace = 0
	}
	next := time.NewTimer(grace)
	defer next.Stop()
	for interval := 20 * time.Millisecond; ; interval = min(2*interval, 200*time.Millisecond) {
		select {
		case r := <-held:
			return r, nil
		case <-ctx.Done():
			return idempotency.Response{}, ctx.Err()
		case <-next.C:
		}
		rec, found, err := idempotency.Lookup(ctx, s.Ledger.DB, in.Scope())
		if err != nil && ctx.Err() == nil {
			return idempotency.Response{}, err
		}
		if found && rec.Response != nil && rec.ResourceID == in.PayoutID {
			return *rec.Response, nil
		}
		next.Reset(interval)
	}
}

// localGrace is how long the request that started a payout listens only for the hold in this
// process before it also reads the ledger.
const localGrace = time.Second

// claim writes the idempotency record and the payout, processing, in one transaction.
func (s *Service) claim(ctx context.Context, r Request) (in workflows.PayoutInput, rec idempotency.Record, created bool, err error) {
	err = s.Ledger.InTx(ctx, func(tx pgx.Tx) error {
		uses, err := ledger.PayoutsUnder(ctx, tx, r.Scope.WorkflowID())
		if err != nil {
			return err
		}
		rec, created, err = idempotency.Claim(ctx, tx, r.Scope, r.Fingerprint, r.Scope.PayoutID(uses))
		in = s.input(r, rec.ResourceID)
		if err != nil || !created {
			return err
		}
		return ledger.InsertPayout(ctx, tx, ledger.Payout{ID: in.PayoutID, AccountID: in.AccountID, AmountMinor: in.AmountMinor,
			Currency: in.Currency, Destination: in.Destination, Description: in.Description, WorkflowID: in.WorkflowID,
			Metadata: in.Metadata})
	})
	return in, rec, created && err == nil, err
}

func (s *Service) input(r Request, payoutID string) workflows.PayoutInput {
	return workflows.PayoutInput{
		PayoutHold: activities.PayoutHold{PayoutID: payoutID, OwnerID: r.Scope.OwnerID, Route: r.Scope.Route,
			Key: r.Scope.Key, ReplayFor: activities.Duration(s.TTL)},
		WorkflowID: r.Scope.WorkflowID(), AccountID: r.AccountID, AmountMinor: r.AmountMinor, Currency: r.Currency,
		Destination: r.Destination, Description: r.Description, Metadata: r.Metadata,
		RetryFor: activities.Duration(s.RetryFor), BankRetryFor: activities.Duration(s.BankRetryFor),
		PollAfter: activities.Duration(s.PollAfter), ReturnWindow: activities.Duration(s.ReturnWindow),
	}
}

func (s *Service) operation(in workflows.PayoutInput) operation.Operation {
	return operation.Operation{
		Client: s.Temporal,
		Options: client.StartWorkflowOptions{
			ID:        in.WorkflowID,
			TaskQueue: workflows.TaskQueue,
			// A payout that completed (paid, failed, returned) is never repeated; a run that failed
			// (the bank down for longer than BankRetryFor) may be run again, and asks the bank again
			// under the same key.
			WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
			EnableEagerStart:      s.Eager,
			TypedSearchAttributes: workflows.PayoutSearchAttributes(in),
			StaticSummary:         workflows.PayoutSummary(in),
			Memo:                  workflows.MetadataMemo(in.Metadata),
		},
		Workflow: workflows.Payout,
		Input:    in,
		MemoKey:  memoPayoutID,
		ID:       in.PayoutID,
		Lock:     s.Ledger.LockClaim(in.Scope()),
		Unclaim:  func(ctx context.Context) error { return s.Ledger.Unclaim(ctx, in.Scope(), in.PayoutID) },
	}
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
	h, err := s.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
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
// BankRetryFor, the ledger could not take the outcome), was terminated or timed out, and starts
// each again with the same input: it holds nothing twice (the hold is kept), asks the bank under
// the same key (one payment), and carries on. A payout's run lasts until its return window
// closes, so the report says it started; its status shows how it goes on.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	return operation.EachFailed(ctx, s.Temporal, "Payout", since, func(id string) {
		_, r := operation.Restart(ctx, s.Temporal, id, func(input func(any) error) (operation.Operation, error) {
			var in workflows.PayoutInput
			err := input(&in)
			return s.operation(in), err
		})
		report(r)
	})
}

// ResolveStale makes sure every payout still processing olderThan after its claim has a run
// going, so that no money stays held, and no claim stays unsent, for ever: a payout with no run
// (the API died between the claim and the start), or whose run failed or timed out (the bank
// did not answer for BankRetryFor, the ledger could not take the outcome), is started again. Its
// new run holds nothing twice and asks the bank under the same key. A run an operator
// terminated or canceled is theirs to decide on (`payments rerun failed`); it is counted, not
// restarted. The runs going are read from Temporal's visibility first, in a few pages, those
// still before the bank's outcome only, so that the payouts legitimately waiting on the bank,
// however many, cost nothing each; visibility lags a little, and a payout it misses is
// described before it is started. One payout that cannot be resolved now does not hold up the
// others.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (activities.StaleResult, error) {
	var res activities.StaleResult
	going := map[string]bool{}
	err := operation.EachRunning(ctx, s.Temporal, "Payout", processingRuns, func(workflowID string) { going[workflowID] = true })
	if err != nil {
		return res, err
	}
	var errs []error
	err = s.Ledger.Processing(ctx, olderThan, func(page []ledger.Payout) error {
		for _, po := range page {
			if going[po.WorkflowID] {
				res.Running++
				continue
			}
			outcome, err := s.restart(ctx, po)
			switch {
			case err != nil:
				res.Errors++
				errs = append(errs, fmt.Errorf("payout %s (%s): %w", po.ID, po.WorkflowID, err))
			case outcome == "started":
				res.Started++
			case outcome == "stopped":
				res.Stopped++
			case outcome == "withdrawn":
				res.Withdrawn++
			case outcome == "skipped":
				res.Skipped++
			default:
				res.Running++
			}
		}
		return nil
	})
	return res, errors.Join(append(errs, err)...)
}

// processingRuns admits the payout runs that have not heard the bank's outcome yet: those
// whose payouts are still processing.
var processingRuns = fmt.Sprintf("PayoutStatus IN ('%s', '%s', '%s', '%s')",
	ledger.PayoutHolding, ledger.PayoutSending, ledger.PayoutAwaitingBank, ledger.PayoutBankMismatch)

// restart starts payout po's run again unless one is going or an operator stopped the last one,
// and says which: started, running, stopped, withdrawn (the claim, refused while an earlier use
// of its key still runs) or skipped (under no idempotency scope).
func (s *Service) restart(ctx context.Context, po ledger.Payout) (string, error) {
	scope, ok := idempotency.ScopeOf(po.WorkflowID)
	if ok {
		var err error
		if scope, ok, err = idempotency.Resolve(ctx, s.Ledger.DB, scope, po.ID); err != nil {
			return "", err
		}
	}
	if !ok {
		return "skipped", nil
	}
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, po.WorkflowID, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		return "", operation.TemporalError(err)
	case operation.Memo(desc.GetWorkflowExecutionInfo(), memoPayoutID) != po.ID:
		// The latest run is an earlier use's: start this one after it, unless it is still open.
	case desc.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "running", nil
	case desc.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_TERMINATED,
		desc.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "stopped", nil
	}
	op := s.operation(s.input(Request{Scope: scope, AccountID: po.AccountID, AmountMinor: po.AmountMinor, Currency: po.Currency,
		Destination: po.Destination, Description: po.Description, Metadata: po.Metadata}, po.ID))
	_, err = op.Start(ctx) // a run of an earlier use of the key may hold the ID: Start sorts it out
	var inUse *operation.InUseError
	if errors.As(err, &inUse) {
		return "withdrawn", nil
	}
	return "started", operation.TemporalError(err)
}
