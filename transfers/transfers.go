// Package transfers submits transfers: it claims the idempotency scope, starts the transfer
// workflow under the scope's workflow ID (or joins the run already there) and waits for its
// answer. The HTTP API and the `deposit` command both submit through it.
package transfers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/internal/outage"
	"github.com/payments/payments/workflows"
)

// Service submits transfers.
type Service struct {
	Ledger   *ledger.Ledger
	Temporal client.Client
	SyncWait time.Duration // how long Submit waits for the workflow's result
	TTL      time.Duration // how long a final answer is replayed
	RetryFor time.Duration // how long a transfer retries technical failures
	// Eager starts the workflow's first task in this process when a worker runs here: the
	// transfer then costs no task dispatch through the server before its posting.
	Eager bool
	// Posted, shared with the worker in this process, answers as soon as the posting commits.
	Posted *activities.Posted
}

// Request is a transfer whose accounts and currency the caller has already checked.
type Request struct {
	Scope       idempotency.Scope
	Fingerprint []byte
	From, To    string
	AmountMinor int64
	Currency    string
	Description string
}

// Answer is the HTTP answer to a submission. Replayed is true when an earlier request with the
// same key started the operation this answer reports.
type Answer struct {
	idempotency.Response
	Replayed   bool
	TransferID string // empty when the request was refused before the claim
}

// minStartBudget bounds the claim and the start together, whatever SyncWait is.
const minStartBudget = 5 * time.Second

// Submit runs the transfer once per scope and answers as the contract says (README, "The
// contract"). The error, when not nil, is idempotency.ErrReused, an *InUseError, a *FailedError,
// an outage (Temporal or PostgreSQL unreachable), or PostgreSQL's refusal of a value of the
// request; the Answer then still names the transfer when one was claimed.
//
// Claiming and starting do not follow the client's context: once a request has arrived whole,
// its transfer is claimed and started even if the client hangs up, so a claim is never left
// behind without its workflow. Only the wait for the result ends with the client.
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.SyncWait, minStartBudget))
	defer cancel()
	in, rec, created, err := s.claim(startCtx, r)
	if err != nil {
		return Answer{}, database.Outage(err)
	}
	answer := Answer{TransferID: in.TransferID, Replayed: !created}
	if rec.Response != nil {
		answer.Response = *rec.Response
		return answer, nil
	}

	var posted <-chan activities.TransferOutcome
	if s.Posted != nil { // before the start: an eager start may post before ExecuteWorkflow returns
		var stop func()
		posted, stop = s.Posted.Wait(in.TransferID)
		defer stop()
	}
	run, err := s.start(startCtx, in)
	if err != nil {
		return answer, err
	}

	waitCtx, cancelWait := context.WithTimeout(ctx, s.SyncWait)
	defer cancelWait()
	grace := time.Duration(0) // a duplicate's posting may have committed before it listened
	if created {
		grace = localGrace
	}
	out, err := wait(waitCtx, run, posted, grace)
	// The server may report the deadline a moment before waitCtx itself expires.
	var deadline *serviceerror.DeadlineExceeded
	timedOut := waitCtx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &deadline)
	switch {
	case err == nil:
		answer.Response = out.Response
		return answer, nil
	case isWorkflowFailure(err):
		return s.afterFailedRun(ctx, in, run.GetRunID(), answer)
	case timedOut && ctx.Err() == nil && created:
		return s.pending(ctx, in, rec.CreatedAt, answer)
	case timedOut && ctx.Err() == nil:
		return s.settledAnswer(ctx, in, answer, &InUseError{TransferID: in.TransferID, WorkflowID: in.WorkflowID})
	default:
		return answer, outage.Of("Temporal", fmt.Errorf("waiting for the workflow's result: %w", err))
	}
}

// InUseError is a request whose key's operation is still running after the wait: the first
// request with the same key (or, when EarlierUse is set, an operation of an earlier use of the
// key, whose run is still open). Nothing was done for this request; it may be sent again.
type InUseError struct {
	TransferID, WorkflowID string
	EarlierUse             bool
}

func (e *InUseError) Error() string {
	if e.EarlierUse {
		return "workflow " + e.WorkflowID + " is still running an earlier use of the key"
	}
	return "transfer " + e.TransferID + " is still being processed"
}

// FailedError is a transfer whose workflow run failed, timed out or was terminated, and which
// the ledger shows did not move money. The same request runs it again.
type FailedError struct {
	TransferID, WorkflowID string
}

func (e *FailedError) Error() string {
	return "transfer " + e.TransferID + " failed: its workflow " + e.WorkflowID + " ended without posting it"
}

// afterFailedRun answers for a run that failed, timed out or was terminated. Its posting may
// have committed all the same (a retry deadline that expired during the commit), or may still
// be under way (a run terminated while its posting waited on a lock). Marking the transfer
// failed by that run settles which: it waits for a posting under way and fences off any later
// one of that run, so that the answer "moved no money", once given, stays true.
func (s *Service) afterFailedRun(ctx context.Context, in activities.TransferInput, runID string, answer Answer) (Answer, error) {
	t, err := s.Ledger.MarkFailed(ctx, in.TransferID, runID, "its workflow ended before posting it; no money moved")
	if err != nil {
		return answer, database.Outage(err)
	}
	if !ledger.Final(t.Status) {
		return answer, &FailedError{TransferID: in.TransferID, WorkflowID: in.WorkflowID}
	}
	_, resp, err := ledger.StoredResponse(ctx, s.Ledger.DB, in.Scope(), t)
	answer.Response = resp
	return answer, database.Outage(err)
}

// settledAnswer is the transfer's final answer if the ledger holds one (its posting committed
// however the run ended), and notFinal otherwise.
func (s *Service) settledAnswer(ctx context.Context, in activities.TransferInput, answer Answer, notFinal error) (Answer, error) {
	resp, final, err := s.finalAnswer(ctx, in)
	if err != nil {
		return answer, database.Outage(err)
	}
	if !final {
		return answer, notFinal
	}
	answer.Response = resp
	return answer, nil
}

// finalAnswer reads the transfer of in from the ledger and, if it is final, the answer stored
// when it was posted.
func (s *Service) finalAnswer(ctx context.Context, in activities.TransferInput) (idempotency.Response, bool, error) {
	t, err := s.Ledger.Transfer(ctx, "", in.TransferID)
	if err != nil || !ledger.Final(t.Status) {
		return idempotency.Response{}, false, err
	}
	_, resp, err := ledger.StoredResponse(ctx, s.Ledger.DB, in.Scope(), t)
	return resp, err == nil, err
}

// localGrace is how long the request that started a transfer listens only for the posting in
// this process before it also polls Temporal for the workflow's result. Under serve the posting
// nearly always runs here (eager start), within milliseconds when the machine is not
// overloaded, so most transfers cost no result poll at all. A run elsewhere is answered up to
// localGrace later. A duplicate polls at once: the posting it waits for may have committed
// before it began to listen.
const localGrace = time.Second

// wait returns the workflow's result, or the posting's outcome if this process hears of it
// first; for grace it listens only for the posting. A result poll, once started, is never cancelled because the posting answered: it ends
// by itself, moments later when the workflow closes (or at ctx's deadline). Cancelling it while
// the server reads the closed history is what wedges the dev server's single SQLite connection
// ("interrupted (9)", docs/adr/0004-result-polls.md).
func wait(ctx context.Context, run client.WorkflowRun, posted <-chan activities.TransferOutcome, grace time.Duration) (activities.TransferOutcome, error) {
	var out activities.TransferOutcome
	if ctx.Err() != nil || posted == nil { // a caller already gone, or no worker in this process
		return out, run.Get(ctx, &out)
	}
	if grace > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case out := <-posted:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		case <-timer.C:
		}
	}
	select {
	case out := <-posted:
		return out, nil
	case r := <-poll(ctx, run):
		return r.out, r.err
	case <-ctx.Done(): // the poll has the same deadline; this is the caller going away
		return out, ctx.Err()
	}
}

type polled struct {
	out activities.TransferOutcome
	err error
}

// poll gets run's result in the background, with ctx's deadline but not its cancellation.
func poll(ctx context.Context, run client.WorkflowRun) <-chan polled {
	pollCtx, cancel := context.WithoutCancel(ctx), func() {}
	if deadline, ok := ctx.Deadline(); ok {
		pollCtx, cancel = context.WithDeadline(pollCtx, deadline)
	}
	done := make(chan polled, 1)
	go func() {
		defer cancel()
		var r polled
		r.err = run.Get(pollCtx, &r.out)
		done <- r
	}()
	return done
}

func (s *Service) input(r Request, transferID string) activities.TransferInput {
	return activities.TransferInput{
		TransferID: transferID, WorkflowID: r.Scope.WorkflowID(),
		From: r.From, To: r.To, AmountMinor: r.AmountMinor, Currency: r.Currency, Description: r.Description,
		OwnerID: r.Scope.OwnerID, Route: r.Scope.Route, Key: r.Scope.Key,
		ReplayFor: activities.Duration(s.TTL), RetryFor: activities.Duration(s.RetryFor),
	}
}

// claim writes the idempotency record and the pending transfer in one transaction, so the
// transfer can be read (GET, a 202's Location) as soon as the scope is claimed. The transfer id
// is the scope's TransferID for this use of the key: the transfers already made under the
// scope's workflow ID are its earlier uses (a key is used again only after its record expired).
func (s *Service) claim(ctx context.Context, r Request) (in activities.TransferInput, rec idempotency.Record, created bool, err error) {
	err = s.Ledger.InTx(ctx, func(tx pgx.Tx) error {
		uses, err := ledger.TransfersUnder(ctx, tx, r.Scope.WorkflowID())
		if err != nil {
			return err
		}
		rec, created, err = idempotency.Claim(ctx, tx, r.Scope, r.Fingerprint, r.Scope.TransferID(uses))
		in = s.input(r, rec.ResourceID)
		if err != nil || !created {
			return err
		}
		return ledger.InsertPending(ctx, tx, in.Posting())
	})
	return in, rec, created && err == nil, err
}

// start starts the run of in's transfer, or finds it: a run already there under the workflow ID
// (a concurrent duplicate's, or a completed one) is this transfer's only if its memo names the
// transfer. A run of an earlier use of the key is never joined: while it is still open (held by
// a worker that stopped, or re-opened by a UI Reset) this use waits its turn (InUseError); once
// it has closed, this use's run starts after it.
func (s *Service) start(ctx context.Context, in activities.TransferInput) (client.WorkflowRun, error) {
	run, err := s.Temporal.ExecuteWorkflow(ctx, s.startOptions(in), workflows.Transfer, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return s.existingRun(ctx, in)
	}
	return run, temporalError(err)
}

// existingRun answers a start refused because a run holds in's workflow ID: running, or
// completed (which the reuse policy does not repeat).
func (s *Service) existingRun(ctx context.Context, in activities.TransferInput) (client.WorkflowRun, error) {
	if run, err := s.ownRun(ctx, in); err != nil || run != nil {
		return run, err
	}
	// The latest run belongs to an earlier use of the key, whose record has expired, and it is
	// closed: start this use's run after it. The starters of this use take turns on the claim's
	// row, so exactly one of them starts it.
	var run client.WorkflowRun
	err := s.Ledger.InTx(ctx, func(tx pgx.Tx) error {
		if err := idempotency.Lock(ctx, tx, in.Scope()); err != nil {
			return err
		}
		var err error
		if run, err = s.ownRun(ctx, in); err != nil || run != nil {
			return err
		}
		opts := s.startOptions(in)
		opts.WorkflowIDReusePolicy = enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
		run, err = s.Temporal.ExecuteWorkflow(ctx, opts, workflows.Transfer, in)
		return temporalError(err)
	})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) { // an earlier use's run was re-opened meanwhile
		return nil, &InUseError{TransferID: in.TransferID, WorkflowID: in.WorkflowID, EarlierUse: true}
	}
	return run, database.Outage(err)
}

// ownRun returns the latest run under in's workflow ID if it runs in's transfer (its memo says
// so), nil if that run is a closed one of an earlier use, and an InUseError if it is a running
// one of an earlier use.
func (s *Service) ownRun(ctx context.Context, in activities.TransferInput) (client.WorkflowRun, error) {
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
	if err != nil {
		return nil, temporalError(err)
	}
	info := desc.GetWorkflowExecutionInfo()
	switch {
	case memoTransfer(info) == in.TransferID:
		return s.Temporal.GetWorkflow(ctx, in.WorkflowID, info.GetExecution().GetRunId()), nil
	case info.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return nil, &InUseError{TransferID: in.TransferID, WorkflowID: in.WorkflowID, EarlierUse: true}
	default:
		return nil, nil
	}
}

// memoTransfer is the transfer a run posts, as its memo says.
func memoTransfer(info *workflowpb.WorkflowExecutionInfo) string {
	var id string
	if p := info.GetMemo().GetFields()[memoTransferID]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &id)
	}
	return id
}

// temporalError marks err as a Temporal outage when it says Temporal could not be reached or
// could not do the work now; any other refusal (a bad request, a namespace without the search
// attributes) is returned as it is, an error of this service, not a reason to retry.
func temporalError(err error) error {
	if err == nil {
		return nil
	}
	var (
		unavailable   *serviceerror.Unavailable
		nsUnavailable *serviceerror.NamespaceUnavailable
		deadline      *serviceerror.DeadlineExceeded
		exhausted     *serviceerror.ResourceExhausted
		internal      *serviceerror.Internal
		aborted       *serviceerror.Aborted
		canceled      *serviceerror.Canceled
	)
	if errors.As(err, &unavailable) || errors.As(err, &nsUnavailable) || errors.As(err, &deadline) ||
		errors.As(err, &exhausted) || errors.As(err, &internal) || errors.As(err, &aborted) ||
		errors.As(err, &canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return outage.Of("Temporal", err)
	}
	return err
}

// memoTransferID names the memo field holding the transfer a run posts.
const memoTransferID = "transfer_id"

func (s *Service) startOptions(in activities.TransferInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:        in.WorkflowID,
		TaskQueue: workflows.TaskQueue,
		// A completed run is never repeated; a failed one may be run again under the same ID.
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		// A run already going is not joined blindly: it may be one of an earlier use of the key
		// (a run held open, or re-opened by a UI Reset). existingRun joins it only if its memo
		// names this transfer.
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		EnableEagerStart:                         s.Eager,
		TypedSearchAttributes:                    workflows.SearchAttributes(in),
		StaticSummary:                            workflows.Summary(in),
		Memo:                                     map[string]any{memoTransferID: in.TransferID},
	}
}

// pending is the 202 answer while the workflow is still running. It is not stored: the final
// answer replaces it. A transfer found final meanwhile is answered with its final answer.
func (s *Service) pending(ctx context.Context, in activities.TransferInput, createdAt time.Time, answer Answer) (Answer, error) {
	t, err := s.Ledger.Transfer(ctx, "", in.TransferID)
	if err == nil && ledger.Final(t.Status) {
		_, resp, err := ledger.StoredResponse(ctx, s.Ledger.DB, in.Scope(), t)
		answer.Response = resp
		return answer, database.Outage(err)
	}
	if err != nil || t.Status != ledger.StatusPending { // unreadable, or marked failed: still running here
		t = ledger.Transfer{ID: in.TransferID, Status: ledger.StatusPending, FromAccountID: in.From,
			ToAccountID: in.To, AmountMinor: in.AmountMinor, Currency: in.Currency,
			Description: in.Description, WorkflowID: in.WorkflowID, CreatedAt: ledger.UTC(createdAt)}
	}
	t.Status = ledger.StatusPending
	body, _ := json.Marshal(t)
	answer.Response = idempotency.Response{Status: http.StatusAccepted, ContentType: "application/json",
		Location: "/v1/transfers/" + in.TransferID, Body: body}
	return answer, nil
}

func isWorkflowFailure(err error) bool {
	var wfErr *temporal.WorkflowExecutionError
	return errors.As(err, &wfErr)
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
