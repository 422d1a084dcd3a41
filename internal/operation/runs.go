// Package operation runs operations claimed under idempotency scopes: the workflow ID is the
// scope's, and a run is this operation's only if its memo names the operation.
package operation

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/outage"
)

// Operation is an operation to run once under a workflow ID.
type Operation struct {
	Client    client.Client
	Converter converter.DataConverter     // Client's, to read runs' memos (nil: the SDK's default)
	Options   client.StartWorkflowOptions // ID, task queue, attributes; Start adds the memo
	Workflow  any
	Input     any
	MemoKey   string // the memo field naming the operation, e.g. "transfer_id"
	Kind      Kind   // what the operation makes
	ID        string // the operation's id (a transfer's, a payout's), the memo's value
	// Lock runs f while holding the lock of the operation's claim, so that of the starters of
	// one use of a key, one starts its run after an earlier use's.
	Lock func(ctx context.Context, f func() error) error
	// Unclaim withdraws the claim when an earlier use's run is still open: the caller is told
	// nothing was done (InUseError), so nothing may later run it behind the caller's back.
	Unclaim func(ctx context.Context) error
}

// InUseError is an operation whose workflow ID is taken by its own run still going after the wait,
// or (EarlierUse) by an earlier use's open run. Nothing was done for this request.
type InUseError struct {
	Kind           Kind
	ID, WorkflowID string
	EarlierUse     bool
}

// FailedError is an operation whose run failed, timed out or was terminated, and which the ledger
// shows did not move money. The same request runs it again.
type FailedError struct {
	Kind           Kind // what the operation makes: a transfer, a refund
	ID, WorkflowID string
}

func (e *FailedError) Error() string {
	return string(e.Kind) + " " + e.ID + " failed: its workflow " + e.WorkflowID + " ended without posting it"
}

// Kind names a kind of money movement: the word the API, the logs and the errors use for it.
type Kind string

// The kinds of operation run under an idempotency scope.
const (
	KindTransfer      Kind = "transfer"
	KindRefund        Kind = "refund"
	KindPayout        Kind = "payout"
	KindPayin         Kind = "payin"
	KindAuthorization Kind = "authorization"
	KindScheduled     Kind = "scheduled-transfer"
)

func (e *InUseError) Error() string {
	if e.EarlierUse {
		return "workflow " + e.WorkflowID + " is still running an earlier use of the key"
	}
	return e.ID + " is still being processed"
}

// Start starts the operation's run, or finds it. An earlier use's run is never joined: while it
// is open (a stopped worker's, a payout in its return window, re-opened by a UI Reset) this use
// is refused (InUseError) and its claim withdrawn; once it has closed, this use's run follows.
func (o Operation) Start(ctx context.Context) (client.WorkflowRun, error) {
	run, err := o.Client.ExecuteWorkflow(ctx, o.StartOptions(), o.Workflow, o.Input)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if !errors.As(err, &already) {
		return run, TemporalError(err)
	}
	run, err = o.existingRun(ctx)
	var inUse *InUseError
	if errors.As(err, &inUse) && inUse.EarlierUse && o.Unclaim != nil {
		if uerr := o.Unclaim(ctx); uerr != nil {
			return nil, uerr
		}
	}
	return run, err
}

// StartOptions are the run's: the memo naming the operation, and never joining a run there.
func (o Operation) StartOptions() client.StartWorkflowOptions {
	opts := o.Options
	if o.MemoKey != "" {
		memo := map[string]any{o.MemoKey: o.ID}
		for k, v := range opts.Memo {
			memo[k] = v
		}
		opts.Memo = memo
	}
	// A run already going is not joined blindly: it may be one of an earlier use of the key.
	opts.WorkflowIDConflictPolicy = enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	return opts
}

// Find returns the latest run under the workflow ID if it runs this operation, whatever its
// state, and nil when there is none or it runs another (an earlier use of the key).
func (o Operation) Find(ctx context.Context) (client.WorkflowRun, error) {
	run, err := o.ownRun(ctx)
	var (
		notFound *serviceerror.NotFound
		inUse    *InUseError
	)
	if errors.As(err, &notFound) || errors.As(err, &inUse) {
		return nil, nil
	}
	return run, err
}

// Joined returns the run an Ask started or joined, if it got that far (Find), or else starts it.
// A closed run of the operation's is not started again: one terminated while the caller waited
// is answered as to a start and a result poll, and runs again only when the request is resent.
func (o Operation) Joined(ctx context.Context) (client.WorkflowRun, error) {
	run, err := o.Find(ctx)
	if err == nil && run == nil {
		run, err = o.Start(ctx)
	}
	return run, err
}

// existingRun answers a start refused because a run holds the workflow ID: running, or closed
// in a way the reuse policy does not repeat.
func (o Operation) existingRun(ctx context.Context) (client.WorkflowRun, error) {
	if run, err := o.ownRun(ctx); err != nil || run != nil {
		return run, err
	}
	// The latest run belongs to an earlier use of the key, whose record has expired, and it is
	// closed: start this use's run after it, taking turns with the other starters of this use.
	var run client.WorkflowRun
	err := o.Lock(ctx, func() error {
		var err error
		if run, err = o.ownRun(ctx); err != nil || run != nil {
			return err
		}
		opts := o.StartOptions()
		opts.WorkflowIDReusePolicy = enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
		run, err = o.Client.ExecuteWorkflow(ctx, opts, o.Workflow, o.Input)
		return TemporalError(err)
	})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) { // an earlier use's run was re-opened meanwhile
		return nil, &InUseError{Kind: o.Kind, ID: o.ID, WorkflowID: o.Options.ID, EarlierUse: true}
	}
	return run, err
}

// ownRun returns the latest run under the workflow ID if its memo names this operation; for an
// earlier use's run, nil if it is closed and an InUseError if it is running.
func (o Operation) ownRun(ctx context.Context) (client.WorkflowRun, error) {
	desc, err := o.Client.DescribeWorkflowExecution(ctx, o.Options.ID, "")
	if err != nil {
		return nil, TemporalError(err)
	}
	info := desc.GetWorkflowExecutionInfo()
	id, err := Memo(o.Converter, info, o.MemoKey)
	switch {
	case err != nil:
		return nil, err
	case id == o.ID:
		return o.Client.GetWorkflow(ctx, o.Options.ID, info.GetExecution().GetRunId()), nil
	case info.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return nil, &InUseError{Kind: o.Kind, ID: o.ID, WorkflowID: o.Options.ID, EarlierUse: true}
	default:
		return nil, nil
	}
}

// Memo is the value of a run's memo field key (the operation it runs), or "", read with dc. A
// memo dc cannot read (sealed with keys this process does not hold) is an error, never taken
// for another operation's run: that could start the operation a second time.
func Memo(dc converter.DataConverter, info *workflowpb.WorkflowExecutionInfo, key string) (string, error) {
	var id string
	if p := info.GetMemo().GetFields()[key]; p != nil {
		if err := orDefault(dc).FromPayload(p, &id); err != nil {
			return "", fmt.Errorf("reading the memo of %s (are PAYMENTS_CODEC_KEYS the workers'?): %w", info.GetExecution().GetWorkflowId(), err)
		}
	}
	return id, nil
}

// orDefault is dc, or the SDK's default converter when dc is nil.
func orDefault(dc converter.DataConverter) converter.DataConverter {
	if dc == nil {
		return converter.GetDefaultDataConverter()
	}
	return dc
}

// TemporalError marks err as a Temporal outage when Temporal could not be reached or do the work
// now; any other refusal (a bad request, missing search attributes) is this service's error.
func TemporalError(err error) error {
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

// Ended reports whether err is a run's end without a result (failed, timed out, terminated...).
func Ended(err error) bool {
	var wfErr *temporal.WorkflowExecutionError
	return errors.As(err, &wfErr)
}

// TimedOut reports whether err ended a wait at its deadline; the server may report the
// deadline a moment before the wait's own context expires.
func TimedOut(err error) bool {
	var deadline *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &deadline)
}
