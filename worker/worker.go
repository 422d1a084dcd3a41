// Package worker runs the workflows and activities on the transfer task queue, and keeps the
// idempotency cleanup scheduled.
package worker

import (
	"context"
	"errors"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/workflows"
)

// New returns a worker for the transfer task queue; the caller starts and stops it.
func New(c client.Client, acts *activities.Activities) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(workflows.Transfer, workflow.RegisterOptions{Name: "Transfer"})
	w.RegisterWorkflow(workflows.IdempotencyCleanup)
	w.RegisterActivity(acts)
	return w
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
