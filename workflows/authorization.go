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

// AuthorizationInput is what an authorization workflow takes: the decision that holds its money
// (the authorization's id, and the scope its first answer is stored under), what is held where,
// when it expires, and how long the ledger's steps retry technical failures.
type AuthorizationInput struct {
	ledger.Decision
	WorkflowID    string
	FromAccountID string
	ToAccountID   string
	AmountMinor   int64
	Currency      string
	ExpiresAt     time.Time
	Metadata      map[string]string `json:",omitempty"` // the client's; in the run's memo, never in its search attributes
	RetryFor      config.Duration
}

// AuthorizationOutcome is what an authorization workflow returns: the status it ended in
// (captured, voided, expired, or rejected at once) and, apart, the first answer the API gave
// (201 authorized, or 422 insufficient-funds).
type AuthorizationOutcome struct {
	AuthorizationID string                     `json:"authorization_id"`
	Status          ledger.AuthorizationStatus `json:"status"`
	FirstAnswer     idempotency.Response       `json:"first_answer"`
}

// DecideUpdate is the Update a capture or a void is: its argument a ledger.Decision, its result
// the answer stored for that decision (the authorization captured or voided, or 422 when it had
// ended already). The ledger decides; the run only carries the decision and stops waiting once
// one has won.
const DecideUpdate = "decide"

// ErrTypeOtherAuthorization is an Update refused because the run holds another authorization:
// the run is another use's of the key.
const ErrTypeOtherAuthorization = "OtherAuthorization"

// AuthorizationStatus is the search attribute of where an authorization stands.
var AuthorizationStatus = temporal.NewSearchAttributeKeyKeyword("AuthorizationStatus")

// AuthorizationSearchAttributes are the attributes an authorization starts with.
func AuthorizationSearchAttributes(in AuthorizationInput) temporal.SearchAttributes {
	return movementAttributes(AuthorizationStatus.ValueSet(string(ledger.AuthorizationPending)),
		in.FromAccountID, in.ToAccountID, in.Currency, in.AmountMinor)
}

// AuthorizationSummary is the one line the Temporal UI shows for an authorization: ids, the
// amount, the currency and when it expires (contract §10: no description, no metadata).
func AuthorizationSummary(in AuthorizationInput) string {
	return fmt.Sprintf("authorization %s of %s %s minor from %s to %s, expires %s", in.AuthorizationID,
		groupThousands(in.AmountMinor), in.Currency, in.FromAccountID, in.ToAccountID, in.ExpiresAt.UTC().Format(time.RFC3339))
}

// Authorization holds money for its payee until it is captured, voided, or expires. It holds the
// money (a local activity, answered at once: 201 authorized, or 422 for insufficient funds), then
// waits on two things at once: DecideUpdate (each capture or void, an activity that the ledger
// decides under the authorization's lock) and its own durable timer, which fires at ExpiresAt whether or not a
// worker was running then, and expires it unless a decision won first. A capture, a void and
// the expiry racing are decided once, in the ledger: the losers are answered 422.
func Authorization(ctx workflow.Context, in AuthorizationInput) (AuthorizationOutcome, error) {
	var a *activities.Activities
	var first *idempotency.Response
	answerUpdates(ctx, in.AuthorizationID, ErrTypeOtherAuthorization, &first)
	out := AuthorizationOutcome{AuthorizationID: in.AuthorizationID}
	decide := func(ctx workflow.Context, d ledger.Decision) (activities.Decided, error) {
		ctx = workflow.WithActivityOptions(ctx, decisionOptions(in.RetryFor))
		var got activities.Decided
		err := workflow.ExecuteActivity(ctx, a.DecideAuthorization, d).Get(ctx, &got)
		if err == nil && got.Status.Ended() && !out.Status.Ended() {
			out.Status = got.Status
			setAuthorizationStatus(ctx, got.Status)
		}
		return got, err
	}
	// Version 1: decisions are taken from the start, so that one arriving while the money is
	// being held waits for the hold (an Update the run has no handler for yet is refused). Runs
	// before it took them once the money was held, and only if it was.
	held := func() bool { return first != nil }
	early := workflow.GetVersion(ctx, "decisions-from-start", workflow.DefaultVersion, 1) == 1
	if early {
		if err := takeDecisions(ctx, in, held, decide); err != nil {
			return out, err
		}
	}
	ledgerCtx := workflow.WithLocalActivityOptions(ctx, ledgerOptions(in.RetryFor))
	var hold activities.Decided
	if err := workflow.ExecuteLocalActivity(ledgerCtx, a.HoldAuthorization, in.Decision).Get(ledgerCtx, &hold); err != nil {
		return out, err
	}
	first, out.Status, out.FirstAnswer = &hold.Response, hold.Status, hold.Response
	setAuthorizationStatus(ctx, hold.Status)
	if hold.Status == ledger.AuthorizationAuthorized {
		if !early {
			if err := takeDecisions(ctx, in, held, decide); err != nil {
				return out, err
			}
		}
		if err := awaitExpiry(ctx, in, &out, decide); err != nil {
			return out, err
		}
	}
	// Every decision accepted is answered before the run closes.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return out, nil
}

// takeDecisions registers DecideUpdate: each capture or void, once held says the money is held
// (or refused), is decided by the ledger (decide), which answers those that lost or came after
// the end.
func takeDecisions(ctx workflow.Context, in AuthorizationInput, held func() bool,
	decide func(workflow.Context, ledger.Decision) (activities.Decided, error)) error {
	handler := func(ctx workflow.Context, d ledger.Decision) (idempotency.Response, error) {
		if err := workflow.Await(ctx, held); err != nil {
			return idempotency.Response{}, err
		}
		got, err := decide(ctx, d)
		return got.Response, err
	}
	validator := func(_ workflow.Context, d ledger.Decision) error {
		if d.AuthorizationID != in.AuthorizationID {
			return temporal.NewNonRetryableApplicationError("this run is for "+in.AuthorizationID+", not "+d.AuthorizationID,
				ErrTypeOtherAuthorization, nil)
		}
		if d.Action != ledger.ActionCapture && d.Action != ledger.ActionVoid {
			return temporal.NewNonRetryableApplicationError("a decision is a capture or a void, not "+string(d.Action), "BadDecision", nil)
		}
		return nil
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, DecideUpdate, handler, workflow.UpdateHandlerOptions{Validator: validator})
}

// awaitExpiry waits until a decision ends the authorization or its timer fires; then it expires
// it, unless a decision has won (the ledger says which).
func awaitExpiry(ctx workflow.Context, in AuthorizationInput, out *AuthorizationOutcome,
	decide func(workflow.Context, ledger.Decision) (activities.Decided, error)) error {
	ended := func() bool { return out.Status.Ended() }
	if wait := in.ExpiresAt.Sub(workflow.Now(ctx)); wait > 0 {
		if decided, err := workflow.AwaitWithTimeout(ctx, wait, ended); err != nil || decided {
			return err
		}
	}
	if ended() {
		return nil
	}
	_, err := decide(ctx, ledger.Decision{AuthorizationID: in.AuthorizationID, Action: ledger.ActionExpire})
	return err
}

// decisionOptions are a decision's activity options: a regular activity, not a local one as the
// hold is. Fifty Updates at once, each running a local activity from a workflow task the Update
// made (a speculative one), had the server abort them again and again on the dev server, none
// accepted within PAYMENTS_SYNC_WAIT; as regular activities they are accepted at once.
func decisionOptions(retryFor config.Duration) workflow.ActivityOptions {
	local := ledgerOptions(retryFor)
	return workflow.ActivityOptions{ScheduleToCloseTimeout: local.ScheduleToCloseTimeout,
		StartToCloseTimeout: local.StartToCloseTimeout, RetryPolicy: local.RetryPolicy}
}

func setAuthorizationStatus(ctx workflow.Context, status ledger.AuthorizationStatus) {
	// Only fails when the attribute is not registered: the start would have failed first.
	_ = workflow.UpsertTypedSearchAttributes(ctx, AuthorizationStatus.ValueSet(string(status)))
}
