package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// Activation is a scheduled transfer's activation: how it stands, and its request's answer.
type Activation struct {
	Status   ledger.ScheduledTransferStatus
	Response idempotency.Response
}

// ActivateScheduledTransfer activates scheduled transfer id and stores its request's answer under
// scope, once however often it is called (ledger.ActivateScheduledTransfer).
func (a *Activities) ActivateScheduledTransfer(ctx context.Context, id string, scope idempotency.Scope, replayFor config.Duration) (Activation, error) {
	st, resp, err := a.Ledger.ActivateScheduledTransfer(ctx, id, scope, replayFor, a.ScheduledAnswer)
	if err != nil {
		return Activation{}, retried(ctx, "activating", "scheduled_transfer_id", id, err)
	}
	if a.OnAnswer != nil {
		a.OnAnswer.Answered(id, resp)
	}
	return Activation{Status: st.Status, Response: resp}, nil
}

// Occurred is what starting an occurrence did: Begun is false when the schedule had ended
// (cancelled) and the occurrence did not start; otherwise its transfer and how that stands
// (completed, rejected, or still pending: its own run finishes it).
type Occurred struct {
	Begun          bool
	Status         ledger.ScheduledTransferStatus // the schedule's, after it
	TransferID     string                         `json:",omitempty"`
	TransferStatus ledger.TransferStatus          `json:",omitempty"`
}

// ErrTypeOccurrence is an occurrence no retry can start (the ledger refused it as invalid).
const ErrTypeOccurrence = "InvalidOccurrence"

// RunOccurrence starts occurrence n of scheduled transfer id if the ledger says it may
// (ledger.BeginOccurrence: the next one, the schedule active), and submits its transfer. Fired
// twice, it submits the same transfer twice, which moves money once.
func (a *Activities) RunOccurrence(ctx context.Context, id string, n int) (Occurred, error) {
	st, begun, err := a.Ledger.BeginOccurrence(ctx, id, n)
	if errors.Is(err, ledger.ErrInvalidPosting) {
		return Occurred{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOccurrence, err)
	}
	if err != nil {
		return Occurred{}, retried(ctx, "starting an occurrence", "scheduled_transfer_id", id, err)
	}
	if !begun {
		activity.GetLogger(ctx).Info("occurrence not started: the schedule has ended", "scheduled_transfer_id", id, "occurrence", n, "status", st.Status)
		return Occurred{Status: st.Status}, nil
	}
	out, err := a.Occurrences.SubmitOccurrence(ctx, st, n)
	if err != nil {
		activity.GetLogger(ctx).Warn("submitting an occurrence failed; retrying", "scheduled_transfer_id", id, "occurrence", n, "err", err)
		return Occurred{}, err
	}
	out.Begun, out.Status = true, st.Status
	activity.GetLogger(ctx).Info("occurrence submitted", "scheduled_transfer_id", id, "occurrence", n, "transfer_id", out.TransferID, "transfer_status", out.TransferStatus)
	return out, nil
}
