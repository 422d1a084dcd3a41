package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// ScheduledTransferInput is what a scheduled transfer's workflow takes: the schedule (its id,
// the scope its request's answer is stored under, what moves where and when), the occurrence
// the run starts from, and how long the ledger's steps retry technical failures. A run
// continued as new, or started again by the recovery pass or `payments rerun failed`, takes the
// same input with Next where the ledger (or the run before it) stands.
type ScheduledTransferInput struct {
	ScheduledTransferID string
	WorkflowID          string
	Scope               idempotency.Scope // the schedule's request's
	ReplayFor           config.Duration   // how long its answer is replayed
	FromAccountID       string
	ToAccountID         string
	AmountMinor         int64
	Currency            string
	StartAt             time.Time
	Interval            config.Duration // between occurrences; 0: once
	Limit               int             // occurrences in all; 0: until cancelled
	// Next is the occurrence the run starts from (from 1; 0 is 1). An occurrence the run
	// before it started is started again: the ledger knows it, and its transfer is the same.
	Next     int               `json:",omitempty"`
	Metadata map[string]string `json:",omitempty"` // the client's; in the run's memo, never in its search attributes
	RetryFor config.Duration
	// PerRun is how many occurrences a run starts before it continues as new (0:
	// DefaultPerRun), so that an unbounded schedule's history stays bounded.
	PerRun int `json:",omitempty"`
}

// ScheduledTransferOutcome is what a scheduled transfer's run returns: the status it ended in
// (completed or cancelled), how many occurrences it started, and its request's answer.
type ScheduledTransferOutcome struct {
	ScheduledTransferID string                         `json:"scheduled_transfer_id"`
	Status              ledger.ScheduledTransferStatus `json:"status"`
	Occurrences         int                            `json:"occurrences"` // started by this run
	FirstAnswer         idempotency.Response           `json:"first_answer"`
}

// DefaultPerRun is how many occurrences a scheduled transfer's run starts before it continues
// as new: each costs a timer and an activity, about ten history events.
const DefaultPerRun = 100

// CancelSignal wakes a scheduled transfer's run when the ledger has cancelled it (DELETE): it
// ends at once instead of at its next occurrence, which the ledger would refuse anyway.
const CancelSignal = "cancel"

// ErrTypeOtherScheduledTransfer is an AnswerUpdate refused because the run is another
// scheduled transfer's: another use's of the key.
const ErrTypeOtherScheduledTransfer = "OtherScheduledTransfer"

// ScheduledTransferStatus is the search attribute of where a scheduled transfer stands.
var ScheduledTransferStatus = temporal.NewSearchAttributeKeyKeyword("ScheduledTransferStatus")

// ScheduledTransferSearchAttributes are the attributes a scheduled transfer starts with.
func ScheduledTransferSearchAttributes(in ScheduledTransferInput) temporal.SearchAttributes {
	return movementAttributes(ScheduledTransferStatus.ValueSet(string(ledger.ScheduledPending)),
		in.FromAccountID, in.ToAccountID, in.Currency, in.AmountMinor)
}

// ScheduledTransferSummary is the one line the Temporal UI shows for a scheduled transfer: ids,
// the amount, the currency and its rhythm (contract §10: no description, no metadata). The
// run's current details say when its next occurrence runs.
func ScheduledTransferSummary(in ScheduledTransferInput) string {
	rhythm := "once"
	if in.Interval > 0 {
		rhythm = "every " + time.Duration(in.Interval).String()
		if in.Limit > 0 {
			rhythm += fmt.Sprintf(", %d times", in.Limit)
		}
	}
	return fmt.Sprintf("scheduled transfer %s of %s %s minor from %s to %s, %s from %s", in.ScheduledTransferID,
		groupThousands(in.AmountMinor), in.Currency, in.FromAccountID, in.ToAccountID, rhythm, in.StartAt.UTC().Format(time.RFC3339))
}

// Due is when occurrence n (from 1) of in is due.
func (in ScheduledTransferInput) Due(n int) time.Time {
	return in.StartAt.Add(time.Duration(n-1) * time.Duration(in.Interval))
}

// ScheduledTransfer runs a scheduled transfer. It activates it (a local activity storing the
// request's 201), then, for each occurrence, waits on a durable timer until it is due (a timer
// that fired while no worker ran fires when one returns: each missed occurrence then runs at
// once, in turn) and starts it (RunOccurrence: the ledger decides whether it may, under the
// schedule's lock, and the occurrence is submitted as an ordinary transfer whose scope is the
// schedule's and the occurrence's). It ends when the ledger completes the schedule (its last
// occurrence started) or cancels it (CancelSignal wakes it), and continues as new every PerRun
// occurrences.
func ScheduledTransfer(ctx workflow.Context, in ScheduledTransferInput) (ScheduledTransferOutcome, error) {
	var a *activities.Activities
	var first *idempotency.Response
	answerUpdates(ctx, in.ScheduledTransferID, ErrTypeOtherScheduledTransfer, &first)
	out := ScheduledTransferOutcome{ScheduledTransferID: in.ScheduledTransferID}
	cancel := workflow.GetSignalChannel(ctx, CancelSignal)

	ledgerCtx := workflow.WithLocalActivityOptions(ctx, ledgerOptions(in.RetryFor))
	var act activities.Activation
	if err := workflow.ExecuteLocalActivity(ledgerCtx, a.ActivateScheduledTransfer, in.ScheduledTransferID, in.Scope, in.ReplayFor).
		Get(ledgerCtx, &act); err != nil {
		return out, err
	}
	first, out.FirstAnswer = &act.Response, act.Response
	setScheduledStatus(ctx, &out, act.Status)

	occurrenceCtx := workflow.WithActivityOptions(ctx, occurrenceOptions(in.RetryFor))
	perRun := in.PerRun
	if perRun <= 0 {
		perRun = DefaultPerRun
	}
	for n := max(in.Next, 1); out.Status == ledger.ScheduledActive; n++ {
		if out.Occurrences == perRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			next := in
			next.Next = n
			return out, workflow.NewContinueAsNewError(ctx, ScheduledTransfer, next)
		}
		due := in.Due(n)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("next: occurrence %d at %s", n, due.UTC().Format(time.RFC3339)))
		if cancelled := awaitDue(ctx, cancel, n, due); cancelled {
			setScheduledStatus(ctx, &out, ledger.ScheduledCancelled)
			break
		}
		var occ activities.Occurred
		if err := workflow.ExecuteActivity(occurrenceCtx, a.RunOccurrence, in.ScheduledTransferID, n).Get(ctx, &occ); err != nil {
			return out, err
		}
		if occ.Begun {
			out.Occurrences++
		}
		setScheduledStatus(ctx, &out, occ.Status)
	}
	workflow.SetCurrentDetails(ctx, "ended: "+string(out.Status))
	// An update accepted as the run ends is answered before the run closes.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return out, nil
}

// awaitDue waits on a durable timer until occurrence n is due, unless the schedule is
// cancelled first (its signal, sent once the ledger has cancelled it): cancelled says so.
func awaitDue(ctx workflow.Context, cancel workflow.ReceiveChannel, n int, due time.Time) (cancelled bool) {
	if cancel.ReceiveAsync(nil) {
		return true
	}
	wait := due.Sub(workflow.Now(ctx))
	if wait <= 0 { // due already: missed while no worker ran, or started late
		return false
	}
	timerCtx, stop := workflow.WithCancel(ctx)
	defer stop()
	timer := workflow.NewTimerWithOptions(timerCtx, wait, workflow.TimerOptions{Summary: fmt.Sprintf("occurrence %d", n)})
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(timer, func(workflow.Future) {})
	sel.AddReceive(cancel, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		cancelled = true
	})
	sel.Select(ctx)
	return cancelled
}

// occurrenceOptions are an occurrence's activity options: a regular activity, since it submits
// a transfer and waits for its answer up to PAYMENTS_SYNC_WAIT. It is tried until it starts, for
// as long as that takes: the schedule was accepted, and a run that gave up on PostgreSQL or its
// workers after RetryFor would fail and leave the schedule active with nothing running it. The
// transfer it submits gives up by itself, as any transfer does (a failed occurrence).
func occurrenceOptions(retryFor config.Duration) workflow.ActivityOptions {
	local := ledgerOptions(retryFor)
	return workflow.ActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{
		InitialInterval: local.RetryPolicy.InitialInterval, BackoffCoefficient: 2, MaximumInterval: local.RetryPolicy.MaximumInterval,
		NonRetryableErrorTypes: []string{activities.ErrTypeInvalidPosting, activities.ErrTypeOccurrence},
	}}
}

// setScheduledStatus records status as the run's, in its outcome and its search attribute.
func setScheduledStatus(ctx workflow.Context, out *ScheduledTransferOutcome, status ledger.ScheduledTransferStatus) {
	if out.Status == status {
		return
	}
	out.Status = status
	// Only fails when the attribute is not registered: the start would have failed first.
	_ = workflow.UpsertTypedSearchAttributes(ctx, ScheduledTransferStatus.ValueSet(string(status)))
}
