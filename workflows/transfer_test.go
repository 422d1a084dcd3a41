package workflows

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/idempotency"
)

var input = activities.TransferInput{TransferID: "tr_1", WorkflowID: "transfer/own_1/k", From: "acc_a", To: "acc_b",
	AmountMinor: 1000, Currency: "USD", OwnerID: "own_1", Route: idempotency.RouteTransfers, Key: "k"}

func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(Transfer)
	var a *activities.Activities
	env.RegisterActivity(a)
	return env
}

func TestTransferCompletes(t *testing.T) {
	env := newEnv(t)
	var a *activities.Activities
	want := activities.TransferOutcome{Status: "completed", Response: idempotency.Response{Status: 201, Body: []byte(`{}`)}}
	env.OnActivity(a.PostTransfer, mock.Anything, input).Return(want, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow error: %v", env.GetWorkflowError())
	}
	var got activities.TransferOutcome
	if err := env.GetWorkflowResult(&got); err != nil || got.Status != "completed" || got.Response.Status != 201 {
		t.Fatalf("result %+v, %v", got, err)
	}
	env.AssertExpectations(t)
}

func TestInsufficientFundsCompletesAsRejected(t *testing.T) {
	env := newEnv(t)
	var a *activities.Activities
	env.OnActivity(a.PostTransfer, mock.Anything, input).Return(activities.TransferOutcome{Status: "rejected",
		Response: idempotency.Response{Status: 422}}, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	var got activities.TransferOutcome
	if err := env.GetWorkflowResult(&got); err != nil || got.Status != "rejected" {
		t.Fatalf("a rejection must complete the workflow: %+v %v", got, err)
	}
}

func TestPostingIsRetriedAfterATechnicalFailure(t *testing.T) {
	env := newEnv(t)
	var a *activities.Activities
	calls := 0
	env.OnActivity(a.PostTransfer, mock.Anything, input).Return(func(context.Context, activities.TransferInput) (activities.TransferOutcome, error) {
		calls++
		if calls < 3 {
			return activities.TransferOutcome{}, errors.New("connection refused")
		}
		return activities.TransferOutcome{Status: "completed"}, nil
	})
	env.ExecuteWorkflow(Transfer, input)
	if err := env.GetWorkflowError(); err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want success on the 3rd", err, calls)
	}
}

func TestInvalidPostingFailsAtOnceAndIsMarkedFailed(t *testing.T) {
	env := newEnv(t)
	var a *activities.Activities
	calls := 0
	env.OnActivity(a.PostTransfer, mock.Anything, input).Return(func(context.Context, activities.TransferInput) (activities.TransferOutcome, error) {
		calls++
		return activities.TransferOutcome{}, temporal.NewNonRetryableApplicationError("bad", activities.ErrTypeInvalidPosting, nil)
	})
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", mock.Anything).Return(nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	if env.GetWorkflowError() == nil || calls != 1 {
		t.Fatalf("want a failed run after one attempt, got err=%v calls=%d", env.GetWorkflowError(), calls)
	}
	env.AssertExpectations(t)
}

func TestRetriesAreBounded(t *testing.T) {
	env := newEnv(t)
	var a *activities.Activities
	in := input
	in.RetryFor = 0 // the default bound applies
	env.OnActivity(a.PostTransfer, mock.Anything, in).Return(activities.TransferOutcome{}, errors.New("database down"))
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", mock.Anything).Return(nil).Once()
	env.ExecuteWorkflow(Transfer, in)
	if env.GetWorkflowError() == nil {
		t.Fatal("a posting that never succeeds must fail the run once its retries are spent")
	}
}

func TestWorkflowIDAndSummary(t *testing.T) {
	if got := Summary(input); got != "1,000 USD minor from acc_a to acc_b" {
		t.Fatalf("summary %q", got)
	}
	for n, want := range map[int64]string{1: "1", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := groupThousands(n); got != want {
			t.Errorf("groupThousands(%d) = %q, want %q", n, got, want)
		}
	}
}
