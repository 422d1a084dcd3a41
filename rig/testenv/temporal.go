package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"

	workflowpb "go.temporal.io/api/workflow/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/workflows"
)

// WaitFor polls cond until it holds, failing t after a minute. It waits for a state of the
// system, never for a length of time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Executions lists the runs under workflow ID id, once visibility shows at least one and none
// running.
func (e *Env) Executions(t testing.TB, id string) []*workflowpb.WorkflowExecutionInfo {
	t.Helper()
	var runs []*workflowpb.WorkflowExecutionInfo
	WaitFor(t, "the runs of "+id+" to be visible and closed", func() bool {
		resp, err := e.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", id),
		})
		if err != nil {
			t.Fatal(err)
		}
		runs = resp.GetExecutions()
		for _, r := range runs {
			if r.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
				return false
			}
		}
		return len(runs) > 0
	})
	return runs
}

// RunCleanup triggers the idempotency cleanup Schedule and returns what the pass it started did.
func (e *Env) RunCleanup(t testing.TB) (res activities.CleanupResult) {
	t.Helper()
	e.RunSchedule(t, workflows.CleanupScheduleID, &res)
	return res
}

// RunSchedule triggers the Temporal Schedule scheduleID (such as workflows.RecoveryScheduleID),
// waits for the run it started and decodes that run's result into result (a pointer, or nil to
// only wait).
func (e *Env) RunSchedule(t testing.TB, scheduleID string, result any) {
	t.Helper()
	ctx := context.Background()
	h := e.Temporal.ScheduleClient().GetHandle(ctx, scheduleID)
	latest := func() (run client.ScheduleWorkflowExecution) {
		d, err := h.Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(d.Info.RecentActions); n > 0 {
			run = *d.Info.RecentActions[n-1].StartWorkflowResult
		}
		return run
	}
	before := latest()
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{Overlap: enums.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}); err != nil {
		t.Fatal(err)
	}
	var run client.ScheduleWorkflowExecution
	WaitFor(t, "the "+scheduleID+" Schedule to start a run", func() bool { run = latest(); return run != before })
	if err := e.Temporal.GetWorkflow(ctx, run.WorkflowID, run.FirstExecutionRunID).Get(ctx, result); err != nil {
		t.Fatalf("the %s run %s: %v", scheduleID, run.WorkflowID, err)
	}
}

// Settled waits for the latest run of workflow id to close and returns how it closed. An API
// in the worker's process answers when the posting commits, a moment before Temporal records
// the workflow's completion.
func (e *Env) Settled(t testing.TB, id string) enums.WorkflowExecutionStatus {
	t.Helper()
	ctx := context.Background()
	_ = e.Temporal.GetWorkflow(ctx, id, "").Get(ctx, nil) // a failed run is an error here; its status says so
	desc, err := e.Temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	return desc.GetWorkflowExecutionInfo().GetStatus()
}

// History is the events of run runID of workflowID (its latest run when runID is empty), so far.
func (e *Env) History(t testing.TB, workflowID, runID string) []*historypb.HistoryEvent {
	t.Helper()
	var events []*historypb.HistoryEvent
	it := e.Temporal.GetWorkflowHistory(context.Background(), workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	return events
}

// AnswerUpdates counts the AnswerUpdates the latest run of workflowID completed: the answers it
// gave an API without a worker in its process.
func (e *Env) AnswerUpdates(t testing.TB, workflowID string) int {
	t.Helper()
	accepted := map[int64]bool{} // the accepted events of AnswerUpdates, which their completions name
	n := 0
	for _, ev := range e.History(t, workflowID, "") {
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil &&
			a.GetAcceptedRequest().GetInput().GetName() == workflows.AnswerUpdate {
			accepted[ev.GetEventId()] = true
		}
		if c := ev.GetWorkflowExecutionUpdateCompletedEventAttributes(); c != nil && accepted[c.GetAcceptedEventId()] {
			n++
		}
	}
	return n
}

// WriteHistory waits for run runID of workflowID (its latest when empty) to close and writes its
// history to file as `temporal workflow show --output json` would: the committed histories
// under workflows/testdata/histories, which every change to the workflows must still replay.
func (e *Env) WriteHistory(t testing.TB, workflowID, runID, file string) {
	t.Helper()
	ctx := context.Background()
	WaitFor(t, "workflow "+workflowID+" to exist", func() bool { // a payin starts when its callback arrives
		_, err := e.Temporal.DescribeWorkflowExecution(ctx, workflowID, runID)
		return err == nil
	})
	_ = e.Temporal.GetWorkflow(ctx, workflowID, runID).Get(ctx, nil) // closed, however it ended
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&historypb.History{Events: e.History(t, workflowID, runID)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
