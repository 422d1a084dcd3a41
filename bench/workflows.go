package bench

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// taskQueue is the baselines' own queue, served by a worker in the bench process, so that an
// empty workflow can start eagerly on it.
const taskQueue = "payments-bench"

// emptyWorkflow does nothing: with eager start, the floor of what Temporal costs per transfer.
func emptyWorkflow(workflow.Context) error { return nil }

// answerUpdate is the Update emptyAnswered answers.
const answerUpdate = "answer"

// emptyAnswered does nothing but answer one Update: with Update-With-Start, the floor of a
// workflow that answers its caller from a worker in another process.
func emptyAnswered(ctx workflow.Context) error {
	answered := false
	if err := workflow.SetUpdateHandler(ctx, answerUpdate, func(workflow.Context) error {
		answered = true
		return nil
	}); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return answered })
}

// tutorialWorkflow is the shape most Temporal tutorials give a transfer: started without eager
// start, one regular activity to post it, another to store the response.
func tutorialWorkflow(ctx workflow.Context, p ledger.Posting) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	var a *tutorialActivities
	var resp idempotency.Response
	if err := workflow.ExecuteActivity(ctx, a.Post, p).Get(ctx, &resp); err != nil {
		return err
	}
	return workflow.ExecuteActivity(ctx, a.Store, p, resp).Get(ctx, nil)
}

type tutorialActivities struct{ ledger *ledger.Ledger }

func (a *tutorialActivities) Post(ctx context.Context, p ledger.Posting) (idempotency.Response, error) {
	_, resp, err := a.ledger.Post(ctx, p, api.TransferAnswer)
	return resp, err
}

func (a *tutorialActivities) Store(ctx context.Context, p ledger.Posting, resp idempotency.Response) error {
	return idempotency.Complete(ctx, a.ledger.DB, p.Scope, resp, time.Duration(p.ReplayFor))
}

func startWorker(c client.Client, l *ledger.Ledger) (sdkworker.Worker, error) {
	w := sdkworker.New(c, taskQueue, sdkworker.Options{})
	w.RegisterWorkflow(emptyWorkflow)
	w.RegisterWorkflow(emptyAnswered)
	w.RegisterWorkflow(tutorialWorkflow)
	w.RegisterActivity(&tutorialActivities{ledger: l})
	return w, w.Start()
}
