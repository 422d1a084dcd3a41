package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/config"
)

// newWebhookEnv returns a test environment for WebhookDelivery, and the search attributes its
// run set last.
func newWebhookEnv() (*testsuite.TestWorkflowEnvironment, *temporal.SearchAttributes) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(WebhookDelivery)
	env.RegisterActivity(a)
	last := &temporal.SearchAttributes{}
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		*last = args.Get(0).(temporal.SearchAttributes)
	}).Return(nil)
	return env, last
}

var notTaken = activities.WebhookBatch{Failed: &activities.WebhookAttempt{EventID: "evt_1", EventType: "transfer.completed",
	Status: 500, Error: "answered 500"}}

// An endpoint that never takes its event is tried with growing waits, for RetryFor, and the run
// then fails as gave-up, for `payments rerun failed`, with the search attributes saying why.
func TestDeliveryGivesUpAfterRetryFor(t *testing.T) {
	env, sa := newWebhookEnv()
	var at []time.Time
	env.OnActivity(a.DeliverWebhooks, mock.Anything, "we_1").Return(func(context.Context, string) (activities.WebhookBatch, error) {
		at = append(at, env.Now())
		return notTaken, nil
	})
	env.ExecuteWorkflow(WebhookDelivery, WebhookInput{EndpointID: "we_1", RetryFor: config.Duration(time.Minute)})
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != ErrTypeGaveUp {
		t.Fatalf("workflow error %v, want %s", err, ErrTypeGaveUp)
	}
	// 1 s, 2 s, 4 s, 8 s, 16 s, then what is left of the minute (29 s): 7 attempts.
	if len(at) != 7 {
		t.Fatalf("%d attempts in a minute, want 7: %v", len(at), at)
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 29 * time.Second} {
		if got := at[i+1].Sub(at[i]); got != want {
			t.Errorf("wait before attempt %d: %s, want %s", i+2, got, want)
		}
	}
	if typ, _ := sa.GetKeyword(WebhookEventType); typ != "transfer.completed" {
		t.Errorf("WebhookEventType %q", typ)
	}
	if status, _ := sa.GetInt64(WebhookStatus); status != 500 {
		t.Errorf("WebhookStatus %d", status)
	}
}

// An endpoint that takes its event again is back to 200, and its failing streak forgotten: the
// next event it refuses starts from a 1 s wait. A deleted endpoint ends the run.
func TestDeliveryRecoversThenEndsWhenDeleted(t *testing.T) {
	env, sa := newWebhookEnv()
	calls := 0
	var at []time.Time
	env.OnActivity(a.DeliverWebhooks, mock.Anything, "we_1").Return(func(context.Context, string) (activities.WebhookBatch, error) {
		calls++
		at = append(at, env.Now())
		switch calls {
		case 1, 2, 3:
			return notTaken, nil
		case 4: // evt_1 goes through, the next is refused
			b := notTaken
			b.Delivered, b.Status = 1, 202
			return b, nil
		case 5:
			return activities.WebhookBatch{Delivered: 3, Status: 204}, nil
		default:
			return activities.WebhookBatch{Deleted: true}, nil
		}
	})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(WakeSignal, nil) }, time.Hour)
	env.ExecuteWorkflow(WebhookDelivery, WebhookInput{EndpointID: "we_1", RetryFor: config.Duration(time.Minute)})
	if err := env.GetWorkflowError(); err != nil || calls != 6 {
		t.Fatalf("workflow error %v after %d batches, want none after 6", err, calls)
	}
	if wait := at[4].Sub(at[3]); wait != time.Second {
		t.Errorf("a new event refused waited %s before its second attempt, want 1s (a streak of its own)", wait)
	}
	if status, _ := sa.GetInt64(WebhookStatus); status != 204 {
		t.Errorf("WebhookStatus %d after a delivery answered 204, want 204", status)
	}
}

// An event refused after the one before it went through in a batch attempt that never returned
// (its worker died after recording the delivery, and the retry started at the next event) has
// a streak of its own: it waits 1 s, not the wait the event before it had grown to, and the
// RetryFor it is given up after is counted from its own first refusal.
func TestBackoffIsPerEventAcrossALostBatch(t *testing.T) {
	env, _ := newWebhookEnv()
	calls := 0
	var at []time.Time
	env.OnActivity(a.DeliverWebhooks, mock.Anything, "we_1").Return(func(context.Context, string) (activities.WebhookBatch, error) {
		calls++
		at = append(at, env.Now())
		switch calls {
		case 1, 2, 3, 4, 5:
			return notTaken, nil
		case 6: // evt_1 was delivered by an attempt that died; this one finds evt_2 first
			b := notTaken
			b.Failed = &activities.WebhookAttempt{EventID: "evt_2", EventType: "transfer.completed", Status: 500, Error: "answered 500"}
			return b, nil
		case 7:
			return activities.WebhookBatch{Delivered: 1, Status: 200}, nil
		default:
			return activities.WebhookBatch{Deleted: true}, nil
		}
	})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(WakeSignal, nil) }, time.Hour)
	env.ExecuteWorkflow(WebhookDelivery, WebhookInput{EndpointID: "we_1", RetryFor: config.Duration(40 * time.Second)})
	if err := env.GetWorkflowError(); err != nil || calls != 8 {
		t.Fatalf("workflow error %v after %d batches, want none after 8 (evt_2 given up on evt_1's clock?)", err, calls)
	}
	if wait := at[6].Sub(at[5]); wait != time.Second {
		t.Errorf("evt_2, refused once, waited %s before its next attempt, want 1s (evt_1 had reached 16s)", wait)
	}
}

// A backlog is drained a full batch after another without waiting for a signal, and the run
// continues as new before its history grows past webhookBatchesPerRun batches.
func TestDeliveryDrainsABacklogAndContinuesAsNew(t *testing.T) {
	env, _ := newWebhookEnv()
	calls := 0
	env.OnActivity(a.DeliverWebhooks, mock.Anything, "we_1").Return(func(context.Context, string) (activities.WebhookBatch, error) {
		calls++
		return activities.WebhookBatch{Delivered: activities.WebhookBatchSize, More: true}, nil
	})
	env.ExecuteWorkflow(WebhookDelivery, WebhookInput{EndpointID: "we_1"})
	if !workflow.IsContinueAsNewError(env.GetWorkflowError()) || calls != webhookBatchesPerRun {
		t.Fatalf("workflow error %v after %d batches, want continue-as-new after %d", env.GetWorkflowError(), calls, webhookBatchesPerRun)
	}
}

func TestWebhookBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 12: 2048 * time.Second, 13: time.Hour, 1000: time.Hour} {
		if got := WebhookBackoff(n); got != want {
			t.Errorf("WebhookBackoff(%d) = %s, want %s", n, got, want)
		}
	}
}
