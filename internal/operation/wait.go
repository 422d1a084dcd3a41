package operation

import (
	"context"
	"crypto/rand"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// A submission hears its answer, for at most SyncWait, from its run's result (WaitResult), the
// ledger (WaitStored), or an Update that starts the run if needed (Ask); each listens first to
// the answer committing in this process (Submission.Heard).

// WaitResult returns the answer of s's operation from its run's result, or from the answer
// committing in this process, whichever comes first. A result poll, once started, is never
// cancelled: it ends by itself when the workflow closes (or at the deadline). Cancelling it while
// the server reads the closed history wedges the dev server's single SQLite connection
// ("interrupted (9)", docs/adr/0004-result-polls.md).
func WaitResult[O any](ctx context.Context, r *Runner, s *Submission, run client.WorkflowRun, answer func(O) idempotency.Response) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, r.SyncWait)
	defer cancel()
	if ctx.Err() != nil || s.Heard == nil { // a caller already gone, or no worker in this process
		var out O
		err := run.Get(ctx, &out)
		return answer(out), err
	}
	if resp, ok, err := listen(ctx, s.Heard, s.Grace); ok || err != nil {
		return resp, err
	}
	select {
	case resp := <-s.Heard:
		return resp, nil
	case p := <-poll[O](ctx, run):
		return answer(p.out), p.err
	case <-ctx.Done(): // the poll has the same deadline; this is the caller going away
		return idempotency.Response{}, ctx.Err()
	}
}

// listen waits for the answer in this process only, for grace: ok when it came.
func listen(ctx context.Context, heard <-chan idempotency.Response, grace time.Duration) (idempotency.Response, bool, error) {
	if grace <= 0 {
		return idempotency.Response{}, false, nil
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case resp := <-heard:
		return resp, true, nil
	case <-ctx.Done():
		return idempotency.Response{}, false, ctx.Err()
	case <-timer.C:
		return idempotency.Response{}, false, nil
	}
}

type polled[O any] struct {
	out O
	err error
}

// poll gets run's result in the background, with ctx's deadline but not its cancellation.
func poll[O any](ctx context.Context, run client.WorkflowRun) <-chan polled[O] {
	pollCtx, cancel := context.WithoutCancel(ctx), func() {}
	if deadline, ok := ctx.Deadline(); ok {
		pollCtx, cancel = context.WithDeadline(pollCtx, deadline)
	}
	done := make(chan polled[O], 1)
	go func() {
		defer cancel()
		var p polled[O]
		p.err = run.Get(pollCtx, &p.out)
		done <- p
	}()
	return done
}

// WaitStored returns the answer of s's operation from the ledger, or from the answer committing in
// this process: for an operation whose run goes on long after its answer (a payout's).
func WaitStored(ctx context.Context, r *Runner, db database.Querier, scope idempotency.Scope, s *Submission) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, r.SyncWait)
	defer cancel()
	if resp, ok, err := listen(ctx, s.Heard, s.Grace); ok || err != nil {
		return resp, err
	}
	next := time.NewTimer(0)
	defer next.Stop()
	for interval := 20 * time.Millisecond; ; interval = min(2*interval, 200*time.Millisecond) {
		select {
		case resp := <-s.Heard:
			return resp, nil
		case <-ctx.Done():
			return idempotency.Response{}, ctx.Err()
		case <-next.C:
		}
		rec, found, err := idempotency.Lookup(ctx, db, scope)
		if err != nil && ctx.Err() == nil {
			return idempotency.Response{}, err
		}
		if found && rec.Response != nil && rec.ResourceID == s.ID {
			return *rec.Response, nil
		}
		next.Reset(interval)
	}
}

// Ask starts op's run, or joins the one there, and asks it for its answer with the Update update
// in one call (Update-With-Start). Compared with a start and a result poll, the answer comes one
// task dispatch sooner and does not wait for the run to close (docs/adr/0008-cluster.md).
func Ask[O any](ctx context.Context, op Operation, update string) (O, string, error) {
	opts := op.StartOptions()
	// Join the run already there, if any: the update's validator refuses it when it runs another
	// operation, and the start's ID reuse policy still never repeats a completed run.
	opts.WorkflowIDConflictPolicy = enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	start := op.Client.NewWithStartWorkflowOperation(opts, op.Workflow, op.Input)
	h, err := op.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: update, UpdateID: updateID(op.ID), Args: []any{op.ID},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var out O
	if err != nil {
		return out, "", err
	}
	err = h.Get(ctx, &out)
	return out, h.RunID(), err
}

// Ending is the rest of an instance's submission once claimed: its operation, what an Ask's
// outcome answers (Asked), and the wait for a run started or joined (Await, while waitCtx lasts).
type Ending[P, O any] struct {
	Op     Operation
	Update string // the Update that asks a run for its answer (Ask)
	Asked  func(out O, runID string) (Answer[P], error)
	Await  func(waitCtx context.Context, run client.WorkflowRun) (Answer[P], error)
}

// finish ends s (Submit): where this process runs a worker (s.Heard), it starts the run and awaits
// its answer; elsewhere it Asks, and on any failure falls back to a start (Joined), so that the
// run has started whatever the client does, and awaits what is left of the one wait.
func finish[P, O any](ctx context.Context, r *Runner, s *Submission, answer Answer[P], e Ending[P, O]) (Answer[P], error) {
	waitCtx, start, startCtx := ctx, e.Op.Start, s.Start
	if s.Heard == nil {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, r.SyncWait)
		defer cancel()
		if out, runID, err := Ask[O](waitCtx, e.Op, e.Update); err == nil {
			return e.Asked(out, runID)
		}
		// The Ask may have spent the whole wait, and s.Start with it: the SDK retries Temporal's
		// refusal while the run's in-flight Updates are at their limit. The start after it has a
		// budget of its own, so that the run is started and the answer is a 202 or a 409, not a 503.
		startCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), minStartBudget)
		defer cancel()
		start = e.Op.Joined
	}
	run, err := start(startCtx)
	if err != nil {
		return answer, err
	}
	return e.Await(waitCtx, run)
}

// updateID is never the same twice: the server answers an update ID the latest run has answered
// with that answer, even when that run failed, and a request after a failed run must start it
// again, not be told again that it failed.
func updateID(id string) string {
	return id + "/" + rand.Text()
}
