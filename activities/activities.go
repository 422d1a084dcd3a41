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
	ReplayFor   Duration // how long the stored response is replayed
	RetryFor    Duration // how long technical failures are retried before the run fails
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
		Description: in.Description, Scope: in.Scope(), ReplayFor: time.Duration(in.ReplayFor),
	}
}

// TransferOutcome is what a posting ended with: "completed" or "rejected", and the HTTP answer
// stored for it, which the API sends as it is.
type TransferOutcome struct {
	Status   string
	Response idempotency.Response
}

// Error types no retry can fix; the workflow fails at once. InvalidPosting: the accounts cannot
// take the transfer. Fenced: this run already gave up on the transfer (ledger.ErrFenced).
const (
	ErrTypeInvalidPosting = "InvalidPosting"
	ErrTypeFenced         = "Fenced"
)

// Activities holds the dependencies of the activities.
type Activities struct {
	Ledger *ledger.Ledger
	Posted *Posted // tells an API in this process of each posting; nil when there is none
	Stale  StaleResolver
}

// PostTransfer posts the transfer and stores its response, once, however often it is called.
func (a *Activities) PostTransfer(ctx context.Context, in TransferInput) (TransferOutcome, error) {
	p := in.Posting()
	p.RunID = activity.GetInfo(ctx).WorkflowExecution.RunID
	t, resp, err := a.Ledger.Post(ctx, p)
	if errors.Is(err, ledger.ErrFenced) {
		return TransferOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeFenced, err)
	}
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
// reason, and returns what the ledger holds: "failed" with no answer, or, if the posting
// committed after all (its deadline expired during the commit), the transfer's final outcome
// and its stored answer. It never undoes a completed or rejected transfer.
func (a *Activities) MarkTransferFailed(ctx context.Context, transferID, reason string) (TransferOutcome, error) {
	t, err := a.Ledger.MarkFailed(ctx, transferID, activity.GetInfo(ctx).WorkflowExecution.RunID, reason)
	if errors.Is(err, ledger.ErrNotFound) {
		return TransferOutcome{Status: ledger.StatusFailed}, nil
	}
	if err != nil || !ledger.Final(t.Status) {
		return TransferOutcome{Status: t.Status}, err
	}
	scope, _ := idempotency.ScopeOf(t.WorkflowID)
	_, resp, err := ledger.StoredResponse(ctx, a.Ledger.DB, scope, t)
	return TransferOutcome{Status: t.Status, Response: resp}, err
}
