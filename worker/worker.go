// Package worker runs the transfer workflow and its activities on the transfer task queue.
package worker

import (
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/workflows"
)

// New returns a worker for the transfer task queue; the caller starts and stops it.
func New(c client.Client, acts *activities.Activities) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(workflows.Transfer, workflow.RegisterOptions{Name: "Transfer"})
	w.RegisterActivity(acts)
	return w
}
