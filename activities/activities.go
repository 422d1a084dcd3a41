// Package activities holds the workflows' activities: the only code of a transfer that touches
// the ledger, and the idempotency cleanup. Each is safe to run more than once.
package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// TransferInput is the workflow's input: everything needed to post the transfer, so that a
// re-run or a UI Reset with the same input posts the same transfer.
type TransferInput struct {
	TransferID  string
	WorkflowID  string
	From        string
	To          string
	AmountMinor int64
	Currency    string
	Description string
	OwnerID     string // with Route and Key: the idempotency scope whose response is stored
	Route       string
	Key         string
	ReplayFor   time.Duration // how long the stored response is replayed
	RetryFor    time.Duration // how long technical failures are retried before the run fails
}

// Scope is the idempotency scope the transfer was requested in.
func (in TransferInput) Scope() idempotency.Scope {
	return idempotency.Scope{OwnerID: in.OwnerID, Route: in.Route, Key: in.Key}
}

// Posting is the ledger posting the input asks for.
func (in TransferInput) Posting() ledger.Posting {
	return ledger.Posting{
		TransferID: in.TransferID, WorkflowID: in.WorkflowID,
		From: in.From, To: in.To, AmountMinor: in.AmountMinor, Currency: in.Currency,
		Description: in.Description, Scope: in.Scope(), ReplayFor: in.ReplayFor,
	}
}

// TransferOutcome is what a posting ended with: "completed" or "rejected", and the HTTP answer
// stored for it, which the API sends as it is.
type TransferOutcome struct {
	Status   string
	Response idempotency.Response
}

// ErrTypeInvalidPosting marks an error no retry can fix; the workflow fails at once.
const ErrTypeInvalidPosting = "InvalidPosting"

// Activities holds the dependencies of the activities.
type Activities struct {
	Ledger *ledger.Ledger
	Posted *Posted // tells an API in this process of each posting; nil when there is none
}

// PostTransfer posts the transfer and stores its response, once, however often it is called.
func (a *Activities) PostTransfer(ctx context.Context, in TransferInput) (TransferOutcome, error) {
	t, resp, err := a.Ledger.Post(ctx, in.Posting())
	if errors.Is(err, ledger.ErrInvalidPosting) {
		return TransferOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidPosting, err)
	}
	if err != nil {
		activity.GetLogger(ctx).Warn("posting failed; retrying", "transfer_id", in.TransferID, "workflow_id", in.WorkflowID, "err", err)
		return TransferOutcome{}, err
	}
	// The same keys as the API's request log, so one transfer can be followed across processes.
	activity.GetLogger(ctx).Info("transfer posted", "transfer_id", in.TransferID, "workflow_id", in.WorkflowID, "status", t.Status)
	out := TransferOutcome{Status: t.Status, Response: resp}
	a.Posted.publish(in.TransferID, out)
	return out, nil
}

// MarkTransferFailed records that the workflow gave up on the transfer, so that reading it shows
// why. It never undoes a completed or rejected transfer.
func (a *Activities) MarkTransferFailed(ctx context.Context, transferID, reason string) error {
	return a.Ledger.MarkFailed(ctx, transferID, reason)
}
