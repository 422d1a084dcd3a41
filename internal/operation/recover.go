package operation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Standing is how an operation's run stands, as the latest run under its workflow ID says.
type Standing int

const (
	// NoRun: no run under the workflow ID, or the latest is an earlier use's (the key used again
	// after its record expired): this operation's run is to be started, after that one.
	NoRun Standing = iota
	// Open: the operation's run is going.
	Open
	// Closed: the operation's run has closed; Classified.Status says how.
	Closed
)

// Classified is an operation's run as Classify found it.
type Classified struct {
	Standing
	Status enums.WorkflowExecutionStatus // how a Closed run closed
	RunID  string                        // a Closed run's
}

// Ended says how a Closed run closed, in a word for people.
func (c Classified) Ended() string {
	switch c.Status {
	case enums.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "terminated"
	case enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "timed out"
	case enums.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "canceled"
	case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "completed"
	default:
		return "failed"
	}
}

// Classify reads how o's run stands: the latest run under its workflow ID is o's only if its
// memo names o.
func (o Operation) Classify(ctx context.Context) (Classified, error) {
	desc, err := o.Client.DescribeWorkflowExecution(ctx, o.Options.ID, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return Classified{Standing: NoRun}, nil
	case err != nil:
		return Classified{}, TemporalError(err)
	}
	info := desc.GetWorkflowExecutionInfo()
	id, err := Memo(o.Converter, info, o.MemoKey)
	switch {
	case err != nil:
		return Classified{}, err
	case id != o.ID:
		return Classified{Standing: NoRun}, nil
	case info.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return Classified{Standing: Open}, nil
	default:
		return Classified{Standing: Closed, Status: info.GetStatus(), RunID: info.GetExecution().GetRunId()}, nil
	}
}

// Recover starts o's run after NoRun or a Closed run the reuse policy lets run again: Started, or
// Withdrawn (an earlier use of the key's run still holds the workflow ID, Operation.Start).
func (o Operation) Recover(ctx context.Context) (Outcome, error) {
	_, err := o.Start(ctx)
	var inUse *InUseError
	if errors.As(err, &inUse) {
		return Withdrawn, nil
	}
	return Started, err
}

// Resolve recovers one claim left pending, id under workflowID: an open run is left running; a
// closed one is closed's to decide on ("" to start it again); with no run of its own, Recover.
func Resolve(ctx context.Context, db database.Querier, workflowID, id string, op func(idempotency.Scope) Operation,
	closed func(Classified) (Outcome, error)) (Outcome, error) {
	scope, ok, err := scopeOf(ctx, db, workflowID, id)
	if err != nil || !ok {
		return Skipped, err
	}
	o := op(scope)
	run, err := o.Classify(ctx)
	switch {
	case err != nil:
		return "", err
	case run.Standing == Open:
		return Running, nil
	case run.Standing == Closed:
		if outcome, err := closed(run); outcome != "" || err != nil {
			return outcome, err
		}
	}
	return o.Recover(ctx)
}

// scopeOf is the whole scope of operation id under workflowID (a shortened ID's key read from its
// record); ok is false when the ID is no scope's or that record has gone: the claim is Skipped.
func scopeOf(ctx context.Context, db database.Querier, workflowID, id string) (idempotency.Scope, bool, error) {
	scope, ok := idempotency.ScopeOf(workflowID)
	if !ok {
		return scope, false, nil
	}
	return idempotency.Resolve(ctx, db, scope, id)
}

// Outcome is what the recovery pass did with one claim.
type Outcome string

// The outcomes, each counted in a Tally.
const (
	Started   Outcome = "started"
	Failed    Outcome = "failed"
	Running   Outcome = "running"
	Withdrawn Outcome = "withdrawn"
	Stopped   Outcome = "stopped"
	Skipped   Outcome = "skipped"
)

// Tally is what one recovery pass did: the recovery workflow's result, as the Temporal UI shows it.
type Tally struct {
	Started   int // claims whose run never started (or, a payout's, whose run failed): started now
	Failed    int // runs that ended without posting: their transfers marked failed
	Running   int // runs still open: left to finish
	Withdrawn int // claims refused while an earlier use of their key still runs: withdrawn (Operation.Unclaim)
	Stopped   int // runs an operator terminated (a payout's), or that gave up (a webhook endpoint's): left for `payments rerun failed`
	Skipped   int // claims under no idempotency scope: for reconcile to report
	Errors    int // claims that could not be resolved in this pass (the error says which): the next pass tries again
	errs      []error
}

// Note counts one claim's outcome, or its error, named by what, for Err.
func (t *Tally) Note(what string, outcome Outcome, err error) {
	if err != nil {
		t.Errors++
		t.errs = append(t.errs, fmt.Errorf("%s: %w", what, err))
		return
	}
	switch outcome {
	case Started:
		t.Started++
	case Failed:
		t.Failed++
	case Withdrawn:
		t.Withdrawn++
	case Stopped:
		t.Stopped++
	case Skipped:
		t.Skipped++
	default:
		t.Running++
	}
}

// Err is the errors noted, and err (the pass's own), joined: one claim that cannot be resolved
// now does not hold up the others.
func (t *Tally) Err(err error) error { return errors.Join(append(t.errs, err)...) }

// Plus is the sum of two passes' results.
func (t Tally) Plus(o Tally) Tally {
	return Tally{Started: t.Started + o.Started, Failed: t.Failed + o.Failed, Running: t.Running + o.Running,
		Withdrawn: t.Withdrawn + o.Withdrawn, Stopped: t.Stopped + o.Stopped, Skipped: t.Skipped + o.Skipped,
		Errors: t.Errors + o.Errors}
}

// A Resolver resolves its kind's claims left pending for longer than olderThan: a service.
type Resolver interface {
	ResolveStale(ctx context.Context, olderThan time.Duration) (Tally, error)
}

// Recovery is the recovery pass (the activity the recovery Schedule's workflow runs): each kind's
// claims in turn, the later ones resolved even when some earlier ones could not be.
type Recovery []Resolver

// ResolveStale resolves every kind's claims left pending for longer than olderThan.
func (r Recovery) ResolveStale(ctx context.Context, olderThan config.Duration) (Tally, error) {
	var sum Tally
	var errs []error
	for _, k := range r {
		res, err := k.ResolveStale(ctx, time.Duration(olderThan))
		sum = sum.Plus(res)
		errs = append(errs, err)
	}
	return sum, errors.Join(errs...)
}

// ResolveWaiting is the recovery pass over operations of workflowType still open in the ledger
// that may wait for days by design (a payout on its bank, an authorization on its payee): the
// runs going are listed from visibility first (those filter admits), so that each of those costs
// nothing; visibility lags, so one it misses is described (Resolve) before it is started. Every
// other one, from pages (a page at a time), is started again unless an operator terminated its
// last run (UnlessTerminated). key names an item, its workflow ID and the operation's id; op
// makes its operation from its whole scope. One that cannot be resolved now does not hold up the
// others.
func ResolveWaiting[T any](ctx context.Context, c client.Client, db database.Querier, workflowType, filter string,
	pages func(func([]T) error) error, key func(T) (name, workflowID, id string),
	op func(T, idempotency.Scope) Operation) (Tally, error) {
	var res Tally
	going := map[string]bool{}
	if err := EachRunning(ctx, c, workflowType, filter, func(workflowID string) { going[workflowID] = true }); err != nil {
		return res, err
	}
	err := pages(func(page []T) error {
		for _, item := range page {
			name, workflowID, id := key(item)
			outcome, err := Running, error(nil)
			if !going[workflowID] {
				outcome, err = Resolve(ctx, db, workflowID, id, func(s idempotency.Scope) Operation { return op(item, s) }, UnlessTerminated)
			}
			res.Note(name, outcome, err)
		}
		return nil
	})
	return res, res.Err(err)
}

// UnlessTerminated is what the recovery pass does with an operation still open in the ledger
// whose run has closed: a run an operator terminated is theirs to decide on (`payments rerun
// failed`), Stopped; any other is started again (""), so that no money stays held for ever.
func UnlessTerminated(run Classified) (Outcome, error) {
	if run.Status == enums.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		return Stopped, nil
	}
	return "", nil
}
