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
	"github.com/payments/payments/internal/ledger"
)

var input = TransferInput{Posting: ledger.Posting{TransferID: "tr_1", WorkflowID: "transfer/own_1/k", From: "acc_a", To: "acc_b",
	AmountMinor: 1000, Currency: "USD", Scope: idempotency.Scope{OwnerID: "own_1", Route: idempotency.RouteTransfers, Key: "k"}}}

// a names the activities for mocking; their methods are never called on it.
var a *activities.Activities

func newEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(Transfer)
	env.RegisterActivity(a)
	return env
}

// countPosts mocks PostTransfer with result, which sees the 1-based number of the call, and
// returns the counter.
func countPosts(env *testsuite.TestWorkflowEnvironment, in TransferInput, result func(call int) (activities.Posted, error)) *int {
	calls := 0
	env.OnActivity(a.PostTransfer, mock.Anything, in.Posting).Return(func(context.Context, ledger.Posting) (activities.Posted, error) {
		calls++
		return result(calls)
	})
	return &calls
}

func TestTransferCompletes(t *testing.T) {
	env := newEnv()
	want := activities.Posted{Status: "completed", Response: idempotency.Response{Status: 201, Body: []byte(`{}`)}}
	env.OnActivity(a.PostTransfer, mock.Anything, input.Posting).Return(want, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow error: %v", env.GetWorkflowError())
	}
	var got TransferOutcome
	if err := env.GetWorkflowResult(&got); err != nil || got.Status != "completed" || got.Response.Status != 201 {
		t.Fatalf("result %+v, %v", got, err)
	}
	env.AssertExpectations(t)
}

func TestInsufficientFundsCompletesAsRejected(t *testing.T) {
	env := newEnv()
	env.OnActivity(a.PostTransfer, mock.Anything, input.Posting).Return(activities.Posted{Status: "rejected",
		Response: idempotency.Response{Status: 422}}, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	var got TransferOutcome
	if err := env.GetWorkflowResult(&got); err != nil || got.Status != "rejected" {
		t.Fatalf("a rejection must complete the workflow: %+v %v", got, err)
	}
}

func TestPostingIsRetriedAfterATechnicalFailure(t *testing.T) {
	env := newEnv()
	calls := countPosts(env, input, func(call int) (activities.Posted, error) {
		if call < 3 {
			return activities.Posted{}, errors.New("connection refused")
		}
		return activities.Posted{Status: "completed"}, nil
	})
	env.ExecuteWorkflow(Transfer, input)
	if err := env.GetWorkflowError(); err != nil || *calls != 3 {
		t.Fatalf("err %v after %d calls, want success on the 3rd", err, *calls)
	}
}

func TestInvalidPostingFailsAtOnceAndIsMarkedFailed(t *testing.T) {
	env := newEnv()
	calls := countPosts(env, input, func(int) (activities.Posted, error) {
		return activities.Posted{}, temporal.NewNonRetryableApplicationError("bad", activities.ErrTypeInvalidPosting, nil)
	})
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", "the accounts can no longer take this transfer").
		Return(activities.Posted{Status: "failed"}, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	if env.GetWorkflowError() == nil || *calls != 1 {
		t.Fatalf("want a failed run after one attempt, got err=%v calls=%d", env.GetWorkflowError(), *calls)
	}
	env.AssertExpectations(t)
}

func TestRetriesAreBounded(t *testing.T) {
	env := newEnv()
	// input.RetryFor is zero, so the default bound applies.
	calls := countPosts(env, input, func(int) (activities.Posted, error) {
		return activities.Posted{}, errors.New("database down")
	})
	// The ledger reads a stable sentence, never the error's text.
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", "the ledger could not post the transfer within its retry window; no money moved").
		Return(activities.Posted{Status: "failed"}, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	if env.GetWorkflowError() == nil || *calls < 2 {
		t.Fatalf("a posting that never succeeds must be retried, then fail the run: err=%v calls=%d", env.GetWorkflowError(), *calls)
	}
	env.AssertExpectations(t)
}

// A posting whose deadline expired during its commit did move the money: the ledger says so
// when the run gives up, and the run completes with the transfer's outcome and stored answer
// instead of failing as if nothing had moved.
func TestRunEndsWithWhatTheLedgerSays(t *testing.T) {
	env := newEnv()
	countPosts(env, input, func(int) (activities.Posted, error) {
		return activities.Posted{}, errors.New("context deadline exceeded")
	})
	stored := activities.Posted{Status: "completed", Response: idempotency.Response{Status: 201, Body: []byte(`{"id":"tr_1"}`)}}
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", mock.Anything).Return(stored, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	var got TransferOutcome
	if err := env.GetWorkflowResult(&got); err != nil || got.Status != "completed" || string(got.Response.Body) != `{"id":"tr_1"}` {
		t.Fatalf("result %+v, %v; want the stored completion", got, err)
	}
	env.AssertExpectations(t)
}

// A run that already gave up on its transfer is fenced off by the ledger: no retry.
func TestFencedPostingIsNotRetried(t *testing.T) {
	env := newEnv()
	calls := countPosts(env, input, func(int) (activities.Posted, error) {
		return activities.Posted{}, temporal.NewNonRetryableApplicationError("fenced", activities.ErrTypeFenced, nil)
	})
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", mock.Anything).Return(activities.Posted{Status: "failed"}, nil).Once()
	env.ExecuteWorkflow(Transfer, input)
	if env.GetWorkflowError() == nil || *calls != 1 {
		t.Fatalf("want a failed run after one attempt, got err=%v calls=%d", env.GetWorkflowError(), *calls)
	}
	env.AssertExpectations(t)
}

func TestSummary(t *testing.T) {
	if got := Summary(input); got != "1,000 USD minor from acc_a to acc_b" {
		t.Fatalf("summary %q", got)
	}
	for n, want := range map[int64]string{1: "1", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := groupThousands(n); got != want {
			t.Errorf("groupThousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// askAnswer sends AnswerUpdate for transferID as the run starts and records how it ended.
type askAnswer struct {
	rejected, err error
	got           TransferOutcome
	completed     bool
}

func (u *askAnswer) send(env *testsuite.TestWorkflowEnvironment, transferID string) {
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(AnswerUpdate, "upd-"+transferID, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { u.rejected = err },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				u.completed, u.err = true, err
				if out, ok := v.(TransferOutcome); ok {
					u.got = out
				}
			},
		}, transferID)
	}, 0)
}

// The update a split API starts a transfer with is answered with the outcome the run returns.
func TestAnswerUpdateGetsTheOutcome(t *testing.T) {
	env := newEnv()
	want := activities.Posted{Status: "completed", Response: idempotency.Response{Status: 201, Body: []byte(`{"id":"tr_1"}`)}}
	env.OnActivity(a.PostTransfer, mock.Anything, input.Posting).Return(want, nil).Once()
	var u askAnswer
	u.send(env, "tr_1")
	env.ExecuteWorkflow(Transfer, input)
	if env.GetWorkflowError() != nil || u.rejected != nil || !u.completed || u.err != nil {
		t.Fatalf("run %v; update rejected %v, completed %v, err %v", env.GetWorkflowError(), u.rejected, u.completed, u.err)
	}
	if u.got.Status != "completed" || string(u.got.Response.Body) != `{"id":"tr_1"}` {
		t.Fatalf("update answered %+v", u.got)
	}
}

// A run of another use of the key refuses to answer for this one: the caller must not take an
// earlier transfer's answer for its own.
func TestAnswerUpdateForAnotherTransferIsRejected(t *testing.T) {
	env := newEnv()
	env.OnActivity(a.PostTransfer, mock.Anything, input.Posting).Return(activities.Posted{Status: "completed"}, nil).Once()
	var u askAnswer
	u.send(env, "tr_2")
	env.ExecuteWorkflow(Transfer, input)
	var appErr *temporal.ApplicationError
	if !errors.As(u.rejected, &appErr) || appErr.Type() != ErrTypeOtherTransfer || u.completed {
		t.Fatalf("update for another transfer: rejected %v, completed %v", u.rejected, u.completed)
	}
	if env.GetWorkflowError() != nil {
		t.Fatalf("the run itself must go on: %v", env.GetWorkflowError())
	}
}

// A run that could not post answers the update with status "failed" (the caller then settles
// the transfer as today's result poll does) and still fails itself.
func TestAnswerUpdateOfAFailedRunSaysFailed(t *testing.T) {
	env := newEnv()
	countPosts(env, input, func(int) (activities.Posted, error) {
		return activities.Posted{}, temporal.NewNonRetryableApplicationError("bad", activities.ErrTypeInvalidPosting, nil)
	})
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", mock.Anything).Return(activities.Posted{Status: "failed"}, nil).Once()
	var u askAnswer
	u.send(env, "tr_1")
	env.ExecuteWorkflow(Transfer, input)
	if env.GetWorkflowError() == nil || !u.completed || u.err != nil || u.got.Status != "failed" {
		t.Fatalf("run %v; update completed %v, err %v, outcome %+v", env.GetWorkflowError(), u.completed, u.err, u.got)
	}
}

// statuses records the TransferStatus values a run sets, in order.
func statuses(env *testsuite.TestWorkflowEnvironment) *[]string {
	var set []string
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		if v, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(TransferStatus); ok {
			set = append(set, v)
		}
	})
	return &set
}

// A run whose posting gave up and that could not record the failure either (the ledger was
// unreachable) does not say "failed": the ledger still says pending, and so does the run.
func TestStatusIsTheLedgersWhenTheFailureCannotBeRecorded(t *testing.T) {
	env := newEnv()
	set := statuses(env)
	countPosts(env, input, func(int) (activities.Posted, error) {
		return activities.Posted{}, errors.New("database down")
	})
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", mock.Anything).Return(activities.Posted{}, errors.New("database down"))
	env.ExecuteWorkflow(Transfer, input)
	if env.GetWorkflowError() == nil {
		t.Fatal("the run must fail: its posting never committed")
	}
	if got := *set; len(got) == 0 || got[len(got)-1] != "pending" {
		t.Fatalf("statuses %v, want the last to be pending, as the ledger says", got)
	}
}

// When the ledger recorded the failure, the run says so.
func TestStatusIsFailedWhenTheLedgerSaysFailed(t *testing.T) {
	env := newEnv()
	set := statuses(env)
	countPosts(env, input, func(int) (activities.Posted, error) {
		return activities.Posted{}, errors.New("database down")
	})
	env.OnActivity(a.MarkTransferFailed, mock.Anything, "tr_1", mock.Anything).Return(activities.Posted{Status: "failed"}, nil)
	env.ExecuteWorkflow(Transfer, input)
	if got := *set; env.GetWorkflowError() == nil || len(got) == 0 || got[len(got)-1] != "failed" {
		t.Fatalf("statuses %v, err %v; want a failed run whose last status is failed", got, env.GetWorkflowError())
	}
}
