package operation

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Runner runs operations claimed under idempotency scopes, for every kind of money movement: a
// kind says only what its operations make and how their runs are shown (Run, Claim); the claim,
// start, wait, classification, recovery and rerun are here.
type Runner struct {
	Client    client.Client
	Converter converter.DataConverter // Client's data converter (Operation.Converter)
	Claims    Claims
	TaskQueue string
	SyncWait  time.Duration // how long a submission waits for the answer (the start: minStartBudget at least)
	Eager     bool          // start the run's first task in this process, when a worker runs here
	Listener  *Listener     // shared with that worker: hears each answer the moment it commits here
}

// Claims is where claims are kept: the ledger.
type Claims interface {
	InTx(ctx context.Context, f func(pgx.Tx) error) error
	// LockClaim runs f holding the lock of scope's claim.
	LockClaim(scope idempotency.Scope) func(ctx context.Context, f func() error) error
	// Unclaim withdraws the claim of operation id under scope, and its row, if nothing was done.
	Unclaim(ctx context.Context, scope idempotency.Scope, id string) error
}

// Run is what an instance says of one operation's run.
type Run struct {
	Kind       Kind
	Workflow   any    // the kind's workflow function
	MemoKey    string // the memo field naming the operation a run makes, e.g. "transfer_id"
	ID         string // what the operation makes: a transfer's id, a payout's
	Scope      idempotency.Scope
	Input      any
	Attributes temporal.SearchAttributes
	Summary    string
	Memo       map[string]any // shown in the Temporal UI, beside the memo naming the operation
}

// Operation is run as r starts it: under the scope's workflow ID, never repeated once completed
// (a run that did not complete may run again), its claim locked and withdrawn through r.Claims.
func (r *Runner) Operation(run Run) Operation {
	return Operation{
		Client:    r.Client,
		Converter: r.Converter,
		Options: client.StartWorkflowOptions{
			ID:                    run.Scope.WorkflowID(),
			TaskQueue:             r.TaskQueue,
			WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
			EnableEagerStart:      r.Eager,
			TypedSearchAttributes: run.Attributes,
			StaticSummary:         run.Summary,
			Memo:                  run.Memo,
		},
		Workflow: run.Workflow,
		Input:    run.Input,
		MemoKey:  run.MemoKey,
		Kind:     run.Kind,
		ID:       run.ID,
		Lock:     r.Claims.LockClaim(run.Scope),
		Unclaim:  func(ctx context.Context) error { return r.Claims.Unclaim(ctx, run.Scope, run.ID) },
	}
}

// Claimed is a request's claim of its scope: the operation's id, whether this request made the
// claim, and the answer stored with it once final.
type Claimed struct {
	ID, WorkflowID string
	Created        bool
	Response       *idempotency.Response
}

// Claim is how an instance claims its operation: Uses counts the operations made under the
// workflow ID by the key's earlier uses (records expired), NewID names the use-th, and Then runs
// in the claim's transaction: it writes a new claim's row, and reads what a duplicate runs.
type Claim struct {
	Scope       idempotency.Scope
	Fingerprint []byte
	Uses        func(ctx context.Context, q database.Querier, workflowID string) (int, error)
	NewID       func(use int) string
	Then        func(ctx context.Context, tx pgx.Tx, c Claimed) error
}

// RowClaim is a Claim's Then for an operation that is a row of its own, run as its row says: a
// new claim inserts fresh (made from the request); a duplicate runs the row as it was claimed
// (claimed, or its own fresh when that claim was withdrawn: claimed's error is notFound); run
// takes the row either way, to make the run's input (an authorization's expiry, a scheduled
// transfer's start, as the first request fixed them).
func RowClaim[T any](fresh func(Claimed) T, claimed func(ctx context.Context, q database.Querier, id string) (T, error), notFound error,
	insert func(ctx context.Context, q database.Querier, row T) error, run func(T)) func(context.Context, pgx.Tx, Claimed) error {
	return func(ctx context.Context, tx pgx.Tx, c Claimed) error {
		row := fresh(c)
		if !c.Created {
			was, err := claimed(ctx, tx, c.ID)
			switch {
			case err == nil:
				row = was
			case !errors.Is(err, notFound):
				return err
			}
		}
		run(row)
		if !c.Created {
			return nil
		}
		return insert(ctx, tx, row)
	}
}

// Claim writes the idempotency record and the operation's row in one transaction, so that the
// operation can be read (GET, a 202's Location) as soon as its scope is claimed.
func (r *Runner) Claim(ctx context.Context, c Claim) (Claimed, error) {
	var out Claimed
	err := r.Claims.InTx(ctx, func(tx pgx.Tx) error {
		workflowID := c.Scope.WorkflowID()
		uses, err := c.Uses(ctx, tx, workflowID)
		if err != nil {
			return err
		}
		rec, created, err := idempotency.Claim(ctx, tx, c.Scope, c.Fingerprint, c.NewID(uses))
		if err != nil {
			return err
		}
		out = Claimed{ID: rec.ResourceID, WorkflowID: workflowID, Created: created, Response: rec.Response}
		return c.Then(ctx, tx, out)
	})
	if err != nil {
		return Claimed{}, err
	}
	return out, nil
}

// minStartBudget bounds the claim and the start together, whatever SyncWait is.
const minStartBudget = 5 * time.Second

// LocalGrace is how long the claiming request listens only in this process before also asking
// Temporal or the ledger: under serve the answer nearly always commits here (eager start). A
// duplicate asks at once: its answer may have committed before it began to listen.
const LocalGrace = time.Second

// Submission is one request's way through the lifecycle after its claim. Claiming and starting do
// not follow the client's context (Start), so a claim is never left without its run when the
// client hangs up; only the wait for the answer ends with the client.
type Submission struct {
	Claimed
	Start context.Context             // for the claim and the start: not the client's
	Heard <-chan idempotency.Response // the answer, if it commits in this process; nil without a listener
	Grace time.Duration               // how long to listen only to Heard (LocalGrace for the claimer)
	done  []func()
}

// Close releases what the submission holds; call it when the request is answered.
func (s *Submission) Close() {
	for _, f := range s.done {
		f()
	}
}

// submit claims c and, unless its answer is stored already, listens for it in this process
// (before the start: an eager start may answer before ExecuteWorkflow returns).
func (r *Runner) submit(ctx context.Context, c Claim) (*Submission, error) {
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(r.SyncWait, minStartBudget))
	s := &Submission{Start: startCtx, done: []func(){cancel}}
	var err error
	if s.Claimed, err = r.Claim(startCtx, c); err != nil || s.Response != nil {
		return s, err
	}
	if r.Listener != nil {
		heard, stop := r.Listener.Listen(s.ID)
		s.Heard, s.done = heard, append(s.done, stop)
		if s.Created {
			s.Grace = LocalGrace
		}
	}
	return s, nil
}

// Answer is how a submission ended: the operation's stored answer, or, when it is not there after
// the wait, the operation as it stands (Pending, a 202). Replayed: an earlier request started it.
type Answer[P any] struct {
	idempotency.Response
	Pending  *P
	Replayed bool
	// The operation's id and workflow ID; empty when the request was refused before the claim.
	ID, WorkflowID string
}

// Submit claims c and, unless that answers the request (its answer stored, the claim refused),
// ends it as the instance says (finish), given the submission and the answer so far.
func Submit[P, O any](ctx context.Context, r *Runner, c Claim, ending func(*Submission, Answer[P]) Ending[P, O]) (Answer[P], error) {
	s, err := r.submit(ctx, c)
	defer s.Close()
	if err != nil {
		return Answer[P]{}, database.Outage(err)
	}
	answer := Answer[P]{ID: s.ID, WorkflowID: s.WorkflowID, Replayed: !s.Created}
	if s.Response != nil {
		answer.Response = *s.Response
		return answer, nil
	}
	return finish(ctx, r, s, answer, ending(s, answer))
}
