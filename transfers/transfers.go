// Package transfers submits transfers: it claims the idempotency scope, starts the transfer
// workflow under the scope's workflow ID (or joins the run already there) and waits for its
// answer. The HTTP API and the `deposit` command both submit through it.
package transfers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/internal/problem"
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

// Submit runs the transfer once per scope and answers as spec §3 and §4 say. The error, when
// not nil, is a *problem.Problem to send as it is; the Answer then still names the transfer
// when one was claimed.
//
// Claiming and starting do not follow the client's context: once a request has arrived whole,
// its transfer is claimed and started even if the client hangs up, so a claim is never left
// behind without its workflow. Only the wait for the result ends with the client.
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.SyncWait, minStartBudget))
	defer cancel()
	in, rec, created, err := s.claim(startCtx, r)
	if errors.Is(err, idempotency.ErrReused) {
		return Answer{}, problem.KeyReused()
	}
	if err != nil {
		return Answer{}, problem.Unavailable("the ledger database is unreachable; retry with the same Idempotency-Key", err)
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
	run, err := s.Temporal.ExecuteWorkflow(startCtx, s.startOptions(in), workflows.Transfer, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		// A completed run holds this ID: ours, which finished after our claim, or one of an
		// earlier use of the key.
		run, err = s.completedRun(startCtx, in)
	}
	if err != nil {
		return answer, problem.Unavailable("Temporal is unreachable; retry with the same Idempotency-Key", err)
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
		p := problem.New(http.StatusInternalServerError, "transfer-failed",
			"the transfer failed after its retries and moved no money; retry with the same Idempotency-Key to run it again")
		p.TransferID, p.WorkflowID = in.TransferID, in.WorkflowID
		return answer, p
	case timedOut && ctx.Err() == nil && created:
		answer.Response = s.pending(ctx, in, rec.CreatedAt)
		return answer, nil
	case timedOut && ctx.Err() == nil:
		p := problem.New(http.StatusConflict, "idempotency-key-in-use",
			"the first request with this Idempotency-Key is still being processed; retry later")
		p.RetryAfter = 1
		p.TransferID, p.WorkflowID = in.TransferID, in.WorkflowID
		return answer, p
	default:
		return answer, problem.Unavailable("lost contact with Temporal while waiting; retry with the same Idempotency-Key", err)
	}
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
		ReplayFor: s.TTL, RetryFor: s.RetryFor,
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

// completedRun answers a start refused because the latest run under in's workflow ID completed.
// If that run posted in's transfer, it is the answer. Otherwise it belongs to an earlier use of
// the key (whose record has expired) and this use's run is started after it; the starters of
// this use take turns on the claim's row, so exactly one of them starts it.
func (s *Service) completedRun(ctx context.Context, in activities.TransferInput) (run client.WorkflowRun, err error) {
	if run, ours, err := s.latestRun(ctx, in); err != nil || ours {
		return run, err
	}
	err = s.Ledger.InTx(ctx, func(tx pgx.Tx) error {
		if err := idempotency.Lock(ctx, tx, in.Scope()); err != nil {
			return err
		}
		var ours bool
		if run, ours, err = s.latestRun(ctx, in); err != nil || ours {
			return err
		}
		opts := s.startOptions(in)
		opts.WorkflowIDReusePolicy = enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
		run, err = s.Temporal.ExecuteWorkflow(ctx, opts, workflows.Transfer, in)
		return err
	})
	return run, err
}

// latestRun returns the latest run under in's workflow ID and whether it is for in's transfer,
// which its memo says.
func (s *Service) latestRun(ctx context.Context, in activities.TransferInput) (client.WorkflowRun, bool, error) {
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
	if err != nil {
		return nil, false, err
	}
	info := desc.GetWorkflowExecutionInfo()
	var id string
	if p := info.GetMemo().GetFields()[memoTransferID]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &id)
	}
	return s.Temporal.GetWorkflow(ctx, in.WorkflowID, info.GetExecution().GetRunId()), id == in.TransferID, nil
}

// memoTransferID names the memo field holding the transfer a run posts.
const memoTransferID = "transfer_id"

func (s *Service) startOptions(in activities.TransferInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:        in.WorkflowID,
		TaskQueue: workflows.TaskQueue,
		// A completed run is never repeated; a failed one may be run again under the same ID.
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		// A duplicate arriving while the first run is going joins that run and waits for it.
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		// Say when a completed run refused the start, instead of quietly returning that run:
		// it may be a run of an earlier use of the key (completedRun).
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		EnableEagerStart:                         s.Eager,
		TypedSearchAttributes:                    workflows.SearchAttributes(in),
		StaticSummary:                            workflows.Summary(in),
		Memo:                                     map[string]any{memoTransferID: in.TransferID},
	}
}

// pending is the 202 answer while the workflow is still running. It is not stored: the final
// answer replaces it.
func (s *Service) pending(ctx context.Context, in activities.TransferInput, createdAt time.Time) idempotency.Response {
	t, err := s.Ledger.Transfer(ctx, "", in.TransferID)
	if err != nil || t.Status != ledger.StatusPending { // unreadable, or finished meanwhile: still say pending
		t = ledger.Transfer{ID: in.TransferID, Status: ledger.StatusPending, FromAccountID: in.From,
			ToAccountID: in.To, AmountMinor: in.AmountMinor, Currency: in.Currency,
			Description: in.Description, WorkflowID: in.WorkflowID, CreatedAt: ledger.UTC(createdAt)}
	}
	body, _ := json.Marshal(t)
	return idempotency.Response{Status: http.StatusAccepted, ContentType: "application/json",
		Location: "/v1/transfers/" + in.TransferID, Body: body}
}

func isWorkflowFailure(err error) bool {
	var wfErr *temporal.WorkflowExecutionError
	return errors.As(err, &wfErr)
}

// ErrNotCustomer is a deposit into an account that does not exist or is a funding account.
var ErrNotCustomer = errors.New("no such customer account")

// Deposit moves amount from the currency's funding account into a customer account, through the
// same workflow and idempotency as an HTTP transfer, scoped to the account's owner and the CLI.
func (s *Service) Deposit(ctx context.Context, accountID string, amount int64, key string) (Answer, error) {
	acc, err := s.Ledger.Account(ctx, "", accountID)
	if errors.Is(err, ledger.ErrNotFound) || (err == nil && acc.Kind != "customer") {
		return Answer{}, ErrNotCustomer
	}
	if err != nil {
		return Answer{}, err
	}
	body, _ := json.Marshal(map[string]any{"account_id": accountID, "amount_minor": amount})
	fp, _ := idempotency.Fingerprint(idempotency.RouteDeposit, body)
	return s.Submit(ctx, Request{
		Scope:       idempotency.Scope{OwnerID: acc.OwnerID, Route: idempotency.RouteDeposit, Key: key},
		Fingerprint: fp, From: money.FundingAccountID(acc.Currency), To: acc.ID,
		AmountMinor: amount, Currency: acc.Currency, Description: "deposit",
	})
}
