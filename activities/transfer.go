package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// Posted is what a posting ended with: the transfer's status and, once it is final, the answer
// stored for it, which the API sends as it is.
type Posted struct {
	Status   ledger.TransferStatus
	Response idempotency.Response
}

// Error types no retry can fix; the workflow fails at once. InvalidPosting: the accounts cannot
// take the transfer. Fenced: this run already gave up on the transfer (ledger.ErrFenced).
const (
	ErrTypeInvalidPosting = "InvalidPosting"
	ErrTypeFenced         = "Fenced"
)

// PostTransfer posts the transfer and stores its answer, once, however often it is called.
func (a *Activities) PostTransfer(ctx context.Context, p ledger.Posting) (Posted, error) {
	p.RunID = activity.GetInfo(ctx).WorkflowExecution.RunID
	t, resp, err := a.Ledger.Post(ctx, p, a.Answer)
	switch {
	case errors.Is(err, ledger.ErrFenced):
		return Posted{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeFenced, err)
	case errors.Is(err, ledger.ErrInvalidPosting):
		return Posted{}, final(err)
	case err != nil:
		activity.GetLogger(ctx).Warn("posting failed; retrying", "transfer_id", p.TransferID, "workflow_id", p.WorkflowID, "err", err)
		return Posted{}, err
	}
	// The same keys as the API's request log, so one transfer can be followed across processes.
	activity.GetLogger(ctx).Info("transfer posted", "transfer_id", p.TransferID, "workflow_id", p.WorkflowID, "status", t.Status)
	out := Posted{Status: t.Status, Response: resp}
	if a.OnAnswer != nil {
		a.OnAnswer.Answered(p.TransferID, resp)
	}
	return out, nil
}

// MarkTransferFailed records that the workflow run gave up on the transfer, so that reading it
// shows reason, and returns what the ledger holds: "failed" with no answer, or, if the posting
// committed after all (its deadline expired during the commit), the transfer's final outcome
// and its stored answer. It never undoes a completed or rejected transfer.
func (a *Activities) MarkTransferFailed(ctx context.Context, transferID, reason string) (Posted, error) {
	t, err := a.Ledger.MarkFailed(ctx, transferID, activity.GetInfo(ctx).WorkflowExecution.RunID, reason)
	if errors.Is(err, ledger.ErrNotFound) {
		return Posted{Status: ledger.TransferFailed}, nil
	}
	if err != nil || !t.Status.Final() {
		return Posted{Status: t.Status}, err
	}
	scope, _ := idempotency.ScopeOf(t.WorkflowID)
	if scope, _, err = idempotency.Resolve(ctx, a.Ledger.DB, scope, t.ID); err != nil {
		return Posted{Status: t.Status}, err
	}
	resp, err := ledger.StoredAnswer(ctx, a.Ledger.DB, scope, t, a.Answer)
	return Posted{Status: t.Status, Response: resp}, err
}
