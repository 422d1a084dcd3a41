package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

var authorizationInput = AuthorizationInput{
	Decision: ledger.Decision{AuthorizationID: "au_1", Action: ledger.ActionAuthorize,
		Scope: idempotency.Scope{OwnerID: "own_1", Route: idempotency.RouteAuthorizations, Key: "k"}},
	WorkflowID: "authorization/own_1/k", FromAccountID: "acc_a", ToAccountID: "acc_b", AmountMinor: 500, Currency: "USD",
}

// newAuthorizationEnv runs an authorization expiring in an hour whose hold ends as held says
// (by default, authorized with a 201).
func newAuthorizationEnv(held ...activities.Decided) (*testsuite.TestWorkflowEnvironment, AuthorizationInput) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(Authorization)
	env.RegisterActivity(a)
	in := authorizationInput
	in.ExpiresAt = env.Now().Add(time.Hour)
	hold := activities.Decided{Status: ledger.AuthorizationAuthorized, Response: idempotency.Response{Status: 201}}
	if len(held) > 0 {
		hold = held[0]
	}
	env.OnActivity(a.HoldAuthorization, mock.Anything, in.Decision).Return(hold, nil).Once()
	return env, in
}

// decided mocks DecideAuthorization: a decision of action ends the authorization in status, and
// returns a counter of its calls.
func decided(env *testsuite.TestWorkflowEnvironment, action ledger.Action, status ledger.AuthorizationStatus, code int) *int {
	calls := 0
	env.OnActivity(a.DecideAuthorization, mock.Anything, mock.MatchedBy(func(d ledger.Decision) bool { return d.Action == action })).
		Return(func(context.Context, ledger.Decision) (activities.Decided, error) {
			calls++
			return activities.Decided{Status: status, Response: idempotency.Response{Status: code}}, nil
		})
	return &calls
}

type updateResult struct {
	resp idempotency.Response
	err  error
}

func (u *updateResult) callbacks() *testsuite.TestUpdateCallback {
	return &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { u.err = err },
		OnComplete: func(r any, err error) { u.err = err; u.resp, _ = r.(idempotency.Response) },
	}
}

// A capture before the timer ends the run at once, captured; the timer never expires it.
func TestAuthorizationCapturedBeforeItsTimer(t *testing.T) {
	env, in := newAuthorizationEnv()
	captures := decided(env, ledger.ActionCapture, ledger.AuthorizationCaptured, 200)
	expiries := decided(env, ledger.ActionExpire, ledger.AuthorizationExpired, 0)
	var got updateResult
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(DecideUpdate, "capture-1", got.callbacks(), ledger.Decision{AuthorizationID: "au_1", Action: ledger.ActionCapture})
	}, time.Minute)
	env.ExecuteWorkflow(Authorization, in)
	var out AuthorizationOutcome
	if err := env.GetWorkflowResult(&out); err != nil || out.Status != ledger.AuthorizationCaptured || out.FirstAnswer.Status != 201 {
		t.Fatalf("outcome %+v, %v", out, err)
	}
	if got.err != nil || got.resp.Status != 200 || *captures != 1 || *expiries != 0 {
		t.Fatalf("update %+v; %d captures, %d expiries", got, *captures, *expiries)
	}
	if env.Now().Sub(in.ExpiresAt) > 0 {
		t.Fatal("the run waited for its timer after the capture")
	}
}

// Without a decision, the run expires it when its timer fires, not before.
func TestAuthorizationExpiresOnItsTimer(t *testing.T) {
	env, in := newAuthorizationEnv()
	expiries := decided(env, ledger.ActionExpire, ledger.AuthorizationExpired, 0)
	env.ExecuteWorkflow(Authorization, in)
	var out AuthorizationOutcome
	if err := env.GetWorkflowResult(&out); err != nil || out.Status != ledger.AuthorizationExpired || *expiries != 1 {
		t.Fatalf("outcome %+v, %v, %d expiries", out, err, *expiries)
	}
	if env.Now().Before(in.ExpiresAt) {
		t.Fatalf("expired at %v, before %v", env.Now(), in.ExpiresAt)
	}
}

// A decision the ledger says lost (it came after another) leaves the run waiting for the one
// that wins, or for its timer; a decision about another authorization is refused.
func TestAuthorizationDecisionThatLostKeepsWaiting(t *testing.T) {
	env, in := newAuthorizationEnv()
	env.OnActivity(a.DecideAuthorization, mock.Anything, mock.MatchedBy(func(d ledger.Decision) bool { return d.Action == ledger.ActionVoid })).
		Return(activities.Decided{Status: ledger.AuthorizationAuthorized, Response: idempotency.Response{Status: 422}}, nil)
	expiries := decided(env, ledger.ActionExpire, ledger.AuthorizationExpired, 0)
	var lost, other updateResult
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(DecideUpdate, "void-1", lost.callbacks(), ledger.Decision{AuthorizationID: "au_1", Action: ledger.ActionVoid})
		env.UpdateWorkflow(DecideUpdate, "other", other.callbacks(), ledger.Decision{AuthorizationID: "au_2", Action: ledger.ActionVoid})
	}, time.Minute)
	env.ExecuteWorkflow(Authorization, in)
	var out AuthorizationOutcome
	if err := env.GetWorkflowResult(&out); err != nil || out.Status != ledger.AuthorizationExpired || *expiries != 1 {
		t.Fatalf("outcome %+v, %v", out, err)
	}
	if lost.err != nil || lost.resp.Status != 422 || other.err == nil {
		t.Fatalf("the lost decision %+v, the other authorization's %+v", lost, other)
	}
}

// An authorization refused for insufficient funds ends at once.
func TestAuthorizationRefusedEndsAtOnce(t *testing.T) {
	env, in := newAuthorizationEnv(activities.Decided{Status: ledger.AuthorizationRejected, Response: idempotency.Response{Status: 422}})
	env.ExecuteWorkflow(Authorization, in)
	var out AuthorizationOutcome
	if err := env.GetWorkflowResult(&out); err != nil || out.Status != ledger.AuthorizationRejected || env.Now().After(in.ExpiresAt) {
		t.Fatalf("outcome %+v, %v", out, err)
	}
}
