package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// newScheduledEnv runs a scheduled transfer of limit occurrences (0: until cancelled) a minute
// apart from now, activated with a 201, whose occurrences the ledger lets start until it says
// ended (the occurrence from which it refuses, 0 for never); starts counts the occurrences asked.
func newScheduledEnv(limit, ended int) (*testsuite.TestWorkflowEnvironment, ScheduledTransferInput, *[]int) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(ScheduledTransfer)
	env.RegisterActivity(a)
	in := ScheduledTransferInput{ScheduledTransferID: "st_1", WorkflowID: "scheduled-transfer/own_1/k",
		Scope:         idempotency.Scope{OwnerID: "own_1", Route: idempotency.RouteScheduledTransfers, Key: "k"},
		FromAccountID: "acc_a", ToAccountID: "acc_b", AmountMinor: 100, Currency: "USD",
		StartAt: env.Now(), Interval: config.Duration(time.Minute), Limit: limit}
	env.OnActivity(a.ActivateScheduledTransfer, mock.Anything, "st_1", in.Scope, in.ReplayFor).
		Return(activities.Activation{Status: ledger.ScheduledActive, Response: idempotency.Response{Status: 201}}, nil).Once()
	var started []int
	env.OnActivity(a.RunOccurrence, mock.Anything, "st_1", mock.Anything).
		Return(func(_ context.Context, _ string, n int) (activities.Occurred, error) {
			started = append(started, n)
			switch {
			case ended > 0 && n >= ended:
				return activities.Occurred{Status: ledger.ScheduledCancelled}, nil
			case n == limit:
				return activities.Occurred{Begun: true, Status: ledger.ScheduledCompleted, TransferStatus: ledger.TransferCompleted}, nil
			}
			return activities.Occurred{Begun: true, Status: ledger.ScheduledActive, TransferStatus: ledger.TransferCompleted}, nil
		})
	return env, in, &started
}

// Each occurrence in turn, each on its own timer, until the last completes the schedule.
func TestScheduledTransferRunsEachOccurrenceOnce(t *testing.T) {
	env, in, started := newScheduledEnv(3, 0)
	env.ExecuteWorkflow(ScheduledTransfer, in)
	var out ScheduledTransferOutcome
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Status != ledger.ScheduledCompleted || out.Occurrences != 3 || len(*started) != 3 || (*started)[2] != 3 {
		t.Fatalf("outcome %+v, occurrences asked %v", out, *started)
	}
	if env.Now().Sub(in.StartAt) < 2*time.Minute {
		t.Fatalf("three occurrences a minute apart ended %v after the start", env.Now().Sub(in.StartAt))
	}
}

// An unbounded schedule continues as new every PerRun occurrences, from the next one.
func TestUnboundedScheduledTransferContinuesAsNew(t *testing.T) {
	env, in, started := newScheduledEnv(0, 0)
	in.PerRun = 2
	env.ExecuteWorkflow(ScheduledTransfer, in)
	err := env.GetWorkflowError()
	if !workflow.IsContinueAsNewError(err) || len(*started) != 2 {
		t.Fatalf("after %v: %v, want to continue as new", *started, err)
	}
}

// The cancel signal ends the run while it waits, without asking the ledger for another
// occurrence; an occurrence the ledger refuses (cancelled meanwhile) ends it too.
func TestCancelledScheduledTransferEnds(t *testing.T) {
	env, in, started := newScheduledEnv(5, 0)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(CancelSignal, nil) }, 90*time.Second)
	env.ExecuteWorkflow(ScheduledTransfer, in)
	var out ScheduledTransferOutcome
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Status != ledger.ScheduledCancelled || len(*started) != 2 || out.Occurrences != 2 {
		t.Fatalf("signalled: outcome %+v, occurrences asked %v", out, *started)
	}

	env, in, started = newScheduledEnv(5, 3)
	env.ExecuteWorkflow(ScheduledTransfer, in)
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Status != ledger.ScheduledCancelled || len(*started) != 3 || out.Occurrences != 2 {
		t.Fatalf("refused by the ledger: outcome %+v, occurrences asked %v", out, *started)
	}
}

// An occurrence the ledger cannot start for longer than the run's RetryFor (PostgreSQL away, its
// workers paused) is tried until it starts: a run that gave up would fail and leave its schedule
// active with nothing running it. (The test environment stops unlimited retries at 10 attempts,
// so the options are what is checked here; the chaos run is where a long outage happens.)
func TestAnOccurrenceIsTriedUntilItStarts(t *testing.T) {
	opts := occurrenceOptions(config.Duration(time.Minute))
	if opts.ScheduleToCloseTimeout != 0 || opts.RetryPolicy == nil || opts.RetryPolicy.MaximumAttempts != 0 ||
		opts.RetryPolicy.MaximumInterval <= 0 || opts.RetryPolicy.MaximumInterval > 10*time.Second {
		t.Fatalf("an occurrence gives up (schedule-to-close %s, retry policy %+v)", opts.ScheduleToCloseTimeout, opts.RetryPolicy)
	}
}
