package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// Decided is what a step of an authorization ended with: its status and the answer stored for
// the step (the authorization's first answer, or a capture's or void's).
type Decided struct {
	Status   ledger.AuthorizationStatus
	Response idempotency.Response
}

// HoldAuthorization holds the authorization's money and stores its first answer, once, however
// often it is called (ledger.Authorize).
func (a *Activities) HoldAuthorization(ctx context.Context, d ledger.Decision) (Decided, error) {
	au, resp, err := a.Ledger.Authorize(ctx, d, a.AuthorizationAnswer)
	if err != nil {
		return Decided{}, retried(ctx, "holding", "authorization_id", d.AuthorizationID, err)
	}
	activity.GetLogger(ctx).Info("authorization held", "authorization_id", d.AuthorizationID, "status", au.Status)
	if a.OnAnswer != nil {
		a.OnAnswer.Answered(d.AuthorizationID, resp)
	}
	return Decided{Status: au.Status, Response: resp}, nil
}

// DecideAuthorization captures, voids or expires the authorization if it is still authorized,
// and stores the decision's answer under its scope, once (ledger.Decide).
func (a *Activities) DecideAuthorization(ctx context.Context, d ledger.Decision) (Decided, error) {
	au, resp, err := a.Ledger.Decide(ctx, d, a.AuthorizationAnswer)
	if err != nil {
		return Decided{}, retried(ctx, string(d.Action), "authorization_id", d.AuthorizationID, err)
	}
	activity.GetLogger(ctx).Info("authorization decided", "authorization_id", d.AuthorizationID, "action", d.Action, "status", au.Status)
	return Decided{Status: au.Status, Response: resp}, nil
}

// retried logs a step that failed and will be retried (of the operation idKey names), and
// returns err as the retry policy should see it.
func retried(ctx context.Context, step, idKey, id string, err error) error {
	if err = final(err); !errors.Is(err, ledger.ErrInvalidPosting) {
		activity.GetLogger(ctx).Warn(step+" failed; retrying", idKey, id, "err", err)
	}
	return err
}
