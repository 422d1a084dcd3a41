package workflows

import (
	"errors"
	"fmt"
	"time"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/ledger"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/idempotency"
)

// TransferInput is what a transfer workflow takes: the posting (the transfer, derived from the
// request alone, and the idempotency scope its answer is stored under), and how long to retry it
// through technical failures. A re-run or a UI Reset with the same input posts the same
// transfer.
type TransferInput struct {
	ledger.Posting
	RetryFor config.Duration // 0: DefaultRetryFor
}

// TransferOutcome is what a transfer workflow returns: the transfer's final status (completed or
// rejected) and the answer stored for it, which the API sends as it is. A run that could not
// post the transfer fails instead.
type TransferOutcome struct {
	Status   ledger.TransferStatus
	Response idempotency.Response
}

// DefaultRetryFor bounds how long a transfer retries technical failures (PostgreSQL unreachable,
// say) when its input does not say.
const DefaultRetryFor = 2 * time.Minute

// Search attributes every transfer workflow carries, for filtering in the Temporal UI.
var (
	TransferStatus = temporal.NewSearchAttributeKeyKeyword("TransferStatus")
	FromAccount    = temporal.NewSearchAttributeKeyKeyword("FromAccount")
	ToAccount      = temporal.NewSearchAttributeKeyKeyword("ToAccount")
	Currency       = temporal.NewSearchAttributeKeyKeyword("Currency")
	AmountMinor    = temporal.NewSearchAttributeKeyInt64("AmountMinor")
)

// SearchAttributes are the attributes a transfer starts with.
func SearchAttributes(in TransferInput) temporal.SearchAttributes {
	return movementAttributes(TransferStatus.ValueSet(string(ledger.TransferPending)), in.From, in.To, in.Currency, in.AmountMinor)
}

// movementAttributes are the attributes a run that moves amount of currency from one account to
// another starts with: its status (its kind's attribute), the accounts, the currency, the amount.
func movementAttributes(status temporal.SearchAttributeUpdate, from, to, currency string, amount int64) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(status, FromAccount.ValueSet(from), ToAccount.ValueSet(to),
		Currency.ValueSet(currency), AmountMinor.ValueSet(amount))
}

// Summary is the one line the Temporal UI shows for a transfer or a refund. It never holds the
// client's metadata (which may be personal data): the run's memo does (MetadataMemo).
func Summary(in TransferInput) string {
	line := fmt.Sprintf("%s %s minor from %s to %s", groupThousands(in.AmountMinor), in.Currency, in.From, in.To)
	if in.RefundOf != "" {
		line = "refund of " + in.RefundOf + ": " + line
	}
	if in.ScheduledTransferID != "" {
		line = fmt.Sprintf("occurrence %d of %s: %s", in.Occurrence, in.ScheduledTransferID, line)
	}
	return line
}

// MetadataMemo is the memo that shows a run's metadata in the Temporal UI, or nil for none.
// A memo is shown with the run and cannot be searched on: metadata may hold personal data, so
// it never goes into search attributes, which are indexed, or into the summary, which lists
// show.
func MetadataMemo(metadata map[string]string) map[string]any {
	if len(metadata) == 0 {
		return nil
	}
	return map[string]any{"metadata": metadata}
}

func groupThousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Transfer posts one transfer. The posting runs as a local activity: the ledger transaction is
// idempotent on the transfer id, so the at-least-once of a local activity is enough, and it
// saves the two task dispatches and six history events a regular activity costs (docs/adr).
// The UI still shows the step as a marker named PostTransfer, with its input and result.
//
// Insufficient funds is an outcome, not an error: the run completes with status "rejected".
// Only technical failures that outlast the retry policy fail the run, which the workflow ID
// reuse policy then lets the same key, `payments rerun failed` or a UI Reset run again.
func Transfer(ctx workflow.Context, in TransferInput) (TransferOutcome, error) {
	var answered *TransferOutcome
	answerUpdates(ctx, in.TransferID, ErrTypeOtherTransfer, &answered)
	out, err := postTransfer(ctx, in)
	if err != nil {
		out.Status = ledger.TransferFailed
	}
	answered = &out
	// An update accepted as the run ends is answered before the run closes: the caller waiting
	// on it gets the outcome, not an error that the run went away.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return out, err
}

// AnswerUpdate is the update an API without a worker in its process starts a transfer or a
// payout with (Update-With-Start): it is answered with the operation's first answer as soon as
// that has committed (a transfer's outcome, or status "failed" when the run could not post it; a
// payout's first answer, once its money is held or refused). Its argument is the operation the
// caller asks about: a run of another use of the key refuses it (ErrTypeOtherTransfer,
// ErrTypeOtherPayout).
const AnswerUpdate = "answer"

// ErrTypeOtherTransfer is an AnswerUpdate refused because the run posts another transfer.
const ErrTypeOtherTransfer = "OtherTransfer"

// answerUpdates registers AnswerUpdate for the run of operation id: its handler waits until
// *answered is set, and its validator refuses another operation (errType). Registering a
// handler adds nothing to the history, so runs started before it replay unchanged.
func answerUpdates[T any](ctx workflow.Context, id, errType string, answered **T) {
	handler := func(ctx workflow.Context, _ string) (T, error) {
		var none T
		if err := workflow.Await(ctx, func() bool { return *answered != nil }); err != nil {
			return none, err
		}
		return **answered, nil
	}
	validator := func(_ workflow.Context, asked string) error {
		if asked != id {
			return temporal.NewNonRetryableApplicationError("this run is for "+id+", not "+asked, errType, nil)
		}
		return nil
	}
	// Only fails for a name registered twice.
	_ = workflow.SetUpdateHandlerWithOptions(ctx, AnswerUpdate, handler, workflow.UpdateHandlerOptions{Validator: validator})
}

func postTransfer(ctx workflow.Context, in TransferInput) (TransferOutcome, error) {
	var a *activities.Activities
	retryFor := time.Duration(in.RetryFor)
	if retryFor <= 0 {
		retryFor = DefaultRetryFor
	}
	postCtx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: retryFor,
		StartToCloseTimeout:    10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        50 * time.Millisecond,
			BackoffCoefficient:     2,
			MaximumInterval:        5 * time.Second,
			NonRetryableErrorTypes: []string{activities.ErrTypeInvalidPosting, activities.ErrTypeFenced},
		},
	})
	// Version 1: the status reads "posting" while the ledger transaction runs. The SDK reports a
	// local activity running longer than most of a workflow task's timeout, and with it this
	// status, so the UI tells a transfer stuck in the ledger (waiting on a lock or on PostgreSQL)
	// from one no worker has picked up yet ("pending"). Runs started before replay without it.
	if workflow.GetVersion(ctx, "posting-status", workflow.DefaultVersion, 1) == 1 {
		setStatus(ctx, ledger.TransferPosting)
	}
	var out TransferOutcome
	err := workflow.ExecuteLocalActivity(postCtx, a.PostTransfer, in.Posting).Get(postCtx, &out)
	if err == nil {
		setStatus(ctx, out.Status)
		return out, nil
	}
	// Version 1: a run whose posting kept failing asks the ledger how the transfer stands, and
	// ends with what it says. The posting may have committed after all (its deadline expired
	// during the commit): the run then completes with the transfer's outcome instead of
	// failing as if no money had moved. The ledger and the client read a stable sentence; the
	// error itself stays in this history (the PostTransfer marker) and the worker's log.
	if workflow.GetVersion(ctx, "settle-after-failure", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		markFailed(ctx, a, in.TransferID, err.Error(), nil)
		return out, err
	}
	workflow.GetLogger(ctx).Warn("posting failed after its retries", "transfer_id", in.TransferID, "error", err)
	var settled TransferOutcome
	markFailed(ctx, a, in.TransferID, failureReason(err), &settled)
	if settled.Status.Final() {
		setStatus(ctx, settled.Status)
		return settled, nil
	}
	// Version 1: the status says "failed" only when the ledger recorded the failure. When it
	// could not be asked (PostgreSQL is usually why the posting gave up), the transfer is still
	// pending there, and so it reads here: the recovery Schedule or the caller's API settles it
	// in the ledger. GetVersion is asked on this path only, so other histories are unchanged.
	status := ledger.TransferFailed
	if settled.Status != ledger.TransferFailed && workflow.GetVersion(ctx, "status-from-ledger", workflow.DefaultVersion, 1) == 1 {
		status = ledger.TransferPending
	}
	setStatus(ctx, status)
	return out, err
}

// failureReason is the sentence the ledger stores for a failed transfer, which clients read as
// its failure_reason: what happened, without the error's text (hosts, SQL, driver messages).
func failureReason(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeInvalidPosting {
		return "the accounts can no longer take this transfer"
	}
	return "the ledger could not post the transfer within its retry window; no money moved"
}

// markFailed records the failure in the ledger, best effort, and reads back how the transfer
// stands into settled (when not nil): if PostgreSQL is what failed, the transfer stays
// "pending" there, and the failed run says why. Before version 1 (old histories) it set the
// status "failed" whatever the ledger said.
func markFailed(ctx workflow.Context, a *activities.Activities, transferID, reason string, settled *TransferOutcome) {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	if settled == nil {
		_ = workflow.ExecuteLocalActivity(ctx, a.MarkTransferFailed, transferID, reason).Get(ctx, nil)
		setStatus(ctx, ledger.TransferFailed)
		return
	}
	_ = workflow.ExecuteLocalActivity(ctx, a.MarkTransferFailed, transferID, reason).Get(ctx, settled)
}

func setStatus(ctx workflow.Context, status ledger.TransferStatus) {
	// Only fails when the attribute is not registered: the start would have failed first.
	_ = workflow.UpsertTypedSearchAttributes(ctx, TransferStatus.ValueSet(string(status)))
}
