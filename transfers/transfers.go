// Package transfers submits transfers and refunds: it claims the idempotency scope, starts the
// transfer workflow under the scope's workflow ID (or finds the run there) and waits for its
// answer. Errors are the domain's (ErrReused, InUseError, FailedError, outages), not the edge's.
package transfers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/outage"
	"github.com/payments/payments/workflows"
)

// Service submits transfers: an instance of the operation lifecycle (operation.Runner).
type Service struct {
	Runner   *operation.Runner
	Ledger   *ledger.Ledger
	Answer   ledger.Answer // the answer stored with a final transfer (api.TransferAnswer)
	TTL      time.Duration // how long a final answer is replayed
	RetryFor time.Duration // how long a transfer retries technical failures
}

// Request is a transfer, or a refund of one, whose accounts and currency the caller has already
// checked.
type Request struct {
	Scope       idempotency.Scope
	Fingerprint []byte
	From, To    string
	AmountMinor int64
	Currency    string
	Description string
	Metadata    map[string]string
	RefundOf    string // the transfer a refund gives money back from; empty for a transfer
	// RefundRemaining is a refund of all that remains, resolved by the ledger when it posts;
	// AmountMinor is then what remains now, which the claim records until then.
	RefundRemaining bool
	// ScheduledTransferID and Occurrence name the schedule and number of an occurrence of a
	// scheduled transfer, which the transfer is (its scope is the occurrence's).
	ScheduledTransferID string
	Occurrence          int
}

// id is the id of the transfer or refund made by the use-th operation in r's scope.
func (r Request) id(use int) string {
	if r.RefundOf != "" {
		return r.Scope.RefundID(use)
	}
	return r.Scope.TransferID(use)
}

// requestOf is the request that made t under scope, as the ledger holds it.
func requestOf(scope idempotency.Scope, t ledger.Transfer) Request {
	r := Request{Scope: scope, From: t.FromAccountID, To: t.ToAccountID, AmountMinor: t.AmountMinor,
		Currency: t.Currency, Description: t.Description, Metadata: t.Metadata}
	if t.RefundOf != nil {
		r.RefundOf = *t.RefundOf
	}
	if t.ScheduledTransferID != nil && t.Occurrence != nil {
		r.ScheduledTransferID, r.Occurrence = *t.ScheduledTransferID, *t.Occurrence
	}
	return r
}

// InUseError is operation.InUseError: the key's operation (or an earlier use's run) is still going.
type InUseError = operation.InUseError

// Answer is how a submission ended: the transfer's final answer as stored, or, when it is still
// running after the wait, the transfer (Pending).
type Answer = operation.Answer[ledger.Transfer]

// FailedError is operation.FailedError: a transfer or refund whose run ended without posting it.
type FailedError = operation.FailedError

// Submit runs the transfer once per scope (docs/contract.md §3, §4). The error is ErrReused, an
// *InUseError, a *FailedError, an outage, or PostgreSQL's refusal of a value; the Answer still
// names a transfer claimed. The claim and the start do not follow ctx (operation.Submission).
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	var in workflows.TransferInput
	return operation.Submit(ctx, s.Runner, s.claim(r, &in), func(sub *operation.Submission, answer Answer) operation.Ending[ledger.Transfer, workflows.TransferOutcome] {
		return operation.Ending[ledger.Transfer, workflows.TransferOutcome]{
			Op: s.operation(in), Update: workflows.AnswerUpdate,
			Asked: func(out workflows.TransferOutcome, runID string) (Answer, error) {
				if !out.Status.Final() { // the run could not post it
					return s.ended(ctx, in, runID, answer)
				}
				answer.Response = out.Response
				return answer, nil
			},
			Await: func(waitCtx context.Context, run client.WorkflowRun) (Answer, error) {
				resp, err := operation.WaitResult(waitCtx, s.Runner, sub, run,
					func(out workflows.TransferOutcome) idempotency.Response { return out.Response })
				if err == nil {
					answer.Response = resp
					return answer, nil
				}
				return s.afterWait(ctx, in, run, answer, sub.Created, err)
			},
		}
	})
}

// afterWait answers when the wait gave no result: when the run ended without one or the wait ran
// out, the ledger says how the transfer stands; otherwise Temporal could not be asked.
func (s *Service) afterWait(ctx context.Context, in workflows.TransferInput, run client.WorkflowRun, answer Answer, created bool, err error) (Answer, error) {
	switch {
	case operation.Ended(err):
		return s.ended(ctx, in, run.GetRunID(), answer)
	case operation.TimedOut(err) && ctx.Err() == nil:
		t, err := s.Ledger.Requested(ctx, in.TransferID)
		if err != nil {
			return answer, database.Outage(err)
		}
		if created { // the first request: 202, the transfer still running
			return s.settled(ctx, in, t, answer, nil)
		}
		return s.settled(ctx, in, t, answer, &InUseError{Kind: kindOf(in), ID: in.TransferID, WorkflowID: in.WorkflowID})
	default:
		return answer, outage.Of("Temporal", fmt.Errorf("waiting for the workflow's result: %w", err))
	}
}

// ended answers for a run (runID) that failed, timed out or was terminated. Its posting may have
// committed anyway (a retry deadline expiring during the commit) or be under way (a run
// terminated while its posting waited on a lock): marking the transfer failed by that run waits
// for a posting under way and fences off any later one, so "moved no money" stays true.
func (s *Service) ended(ctx context.Context, in workflows.TransferInput, runID string, answer Answer) (Answer, error) {
	t, err := s.Ledger.MarkFailed(ctx, in.TransferID, runID, "its workflow ended before posting it; no money moved")
	if err != nil {
		return answer, database.Outage(err)
	}
	return s.settled(ctx, in, t, answer, &FailedError{Kind: kindOf(in), ID: in.TransferID, WorkflowID: in.WorkflowID})
}

// settled answers with t's stored answer when t is final, else with notFinal, or t as pending
// (202), or FailedError when its run gave up: a 202 would promise a transfer nothing is running.
func (s *Service) settled(ctx context.Context, in workflows.TransferInput, t ledger.Transfer, answer Answer, notFinal error) (Answer, error) {
	if !t.Status.Final() {
		if notFinal == nil && t.Status == ledger.TransferFailed {
			notFinal = &FailedError{Kind: kindOf(in), ID: in.TransferID, WorkflowID: in.WorkflowID}
		}
		if notFinal == nil {
			answer.Pending = &t
		}
		return answer, notFinal
	}
	resp, err := ledger.StoredAnswer(ctx, s.Ledger.DB, in.Scope, t, s.Answer)
	answer.Response = resp
	return answer, database.Outage(err)
}

// kindOf is the kind of operation in runs: a transfer or a refund.
func kindOf(in workflows.TransferInput) operation.Kind {
	if in.RefundOf != "" {
		return operation.KindRefund
	}
	return operation.KindTransfer
}

func (s *Service) input(r Request, transferID, workflowID string) workflows.TransferInput {
	in := workflows.TransferInput{
		Posting: ledger.Posting{
			TransferID: transferID, WorkflowID: workflowID, Scope: r.Scope,
			From: r.From, To: r.To, AmountMinor: r.AmountMinor, Currency: r.Currency, Description: r.Description,
			ReplayFor: config.Duration(s.TTL), Metadata: r.Metadata, RefundOf: r.RefundOf,
			ScheduledTransferID: r.ScheduledTransferID, Occurrence: r.Occurrence,
		},
		RetryFor: config.Duration(s.RetryFor),
	}
	if r.RefundOf != "" {
		in.Kind = ledger.KindRefund
	}
	return in
}

// claim claims r's transfer (in is its run's input once claimed); its row is the pending transfer.
func (s *Service) claim(r Request, in *workflows.TransferInput) operation.Claim {
	return operation.Claim{Scope: r.Scope, Fingerprint: r.Fingerprint, Uses: ledger.TransfersUnder, NewID: r.id,
		Then: func(ctx context.Context, tx pgx.Tx, c operation.Claimed) (err error) {
			*in = s.input(r, c.ID, c.WorkflowID)
			switch {
			case !c.Created && r.RefundOf != "":
				// A duplicate runs (or re-runs) the refund as claimed, not what remains now; a refund
				// of all that remains is resolved by its posting from the claimed row.
				in.AmountMinor, err = ledger.ClaimedAmount(ctx, tx, c.ID, in.AmountMinor)
				return err
			case !c.Created:
				return nil
			}
			p := in.Posting
			p.RefundRemaining = r.RefundRemaining // the row, which every run of it posts, says so
			return ledger.InsertPending(ctx, tx, p)
		}}
}

// memoTransferID names the memo field holding the transfer a run posts.
const memoTransferID = "transfer_id"

// operation is in's run: never repeated once completed; a failed one may run again under its ID.
func (s *Service) operation(in workflows.TransferInput) operation.Operation {
	return s.Runner.Operation(operation.Run{Kind: kindOf(in), Workflow: workflows.Transfer, MemoKey: memoTransferID, ID: in.TransferID,
		Scope: in.Scope, Input: in, Attributes: workflows.SearchAttributes(in), Summary: workflows.Summary(in),
		Memo: workflows.MetadataMemo(in.Metadata)})
}

// ErrNotCustomer is a deposit into an account that does not exist or is a funding account.
var ErrNotCustomer = errors.New("no such customer account")

// depositRequest is what a deposit's fingerprint covers.
type depositRequest struct {
	AccountID   string `json:"account_id"`
	AmountMinor int64  `json:"amount_minor"`
}

// Deposit moves amount from the currency's funding account into a customer account, through the
// same workflow and idempotency as an HTTP transfer, scoped to the account's owner and the CLI.
func (s *Service) Deposit(ctx context.Context, accountID string, amount int64, key string) (Answer, error) {
	acc, err := s.Ledger.Account(ctx, "", accountID)
	if errors.Is(err, ledger.ErrNotFound) || (err == nil && acc.Kind != ledger.KindCustomer) {
		return Answer{}, ErrNotCustomer
	}
	if err != nil {
		return Answer{}, err
	}
	fp, err := idempotency.Fingerprint(idempotency.RouteDeposit, depositRequest{AccountID: accountID, AmountMinor: amount})
	if err != nil {
		return Answer{}, err
	}
	return s.Submit(ctx, Request{
		Scope:       idempotency.Scope{OwnerID: acc.OwnerID, Route: idempotency.RouteDeposit, Key: key},
		Fingerprint: fp, From: money.FundingAccountID(acc.Currency), To: acc.ID,
		AmountMinor: amount, Currency: acc.Currency, Description: "deposit",
	})
}
