// Package worker runs the workflows and activities on the transfer task queue, and keeps the
// idempotency cleanup scheduled.
package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/workflows"
)

// New returns a worker for the transfer task queue; the caller starts and stops it.
func New(c client.Client, acts *activities.Activities) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{})
	registerWorkflows(w)
	w.RegisterActivity(acts)
	return w
}

// registerWorkflows registers every workflow under the name running executions know it by.
func registerWorkflows(r sdkworker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.Transfer, workflow.RegisterOptions{Name: "Transfer"})
	r.RegisterWorkflow(workflows.IdempotencyCleanup)
}

// ReplayHistory replays a workflow history exported as JSON (`temporal workflow show --output
// json`, or the Web UI's download) against the workflow code of this build. An error means the
// code would not reproduce that execution: a change that breaks running workflows. The SDK's
// message names the history event where replay diverged.
func ReplayHistory(file string) error {
	r := sdkworker.NewWorkflowReplayer()
	registerWorkflows(r)
	return r.ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), file)
}

// EnsureCleanupSchedule creates the Schedule running the idempotency cleanup, unless it exists.
// Every worker calls it at start; the first one creates it.
func EnsureCleanupSchedule(ctx context.Context, c client.Client) error {
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:      workflows.CleanupScheduleID,
		Spec:    client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: workflows.CleanupEvery}}},
		Overlap: enums.SCHEDULE_OVERLAP_POLICY_SKIP,
		Action: &client.ScheduleWorkflowAction{
			ID:        workflows.CleanupScheduleID,
			Workflow:  workflows.IdempotencyCleanup,
			TaskQueue: workflows.TaskQueue,
		},
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return nil
	}
	return err
}
