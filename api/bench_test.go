package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/rig/testenv"
)

// BenchmarkTransferSequential is one client sending new transfers through HTTP, one at a time,
// against the tuned dev server the tests start: the latency a caller sees for a new transfer.
func BenchmarkTransferSequential(b *testing.B) {
	_, key := env.Owner(b)
	from, to := env.Account(b, key, "USD"), env.Account(b, key, "USD")
	env.Fund(b, from, int64(b.N)+1)
	run := time.Now().UnixNano()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := env.Do(b, "POST", "/v1/transfers", key, fmt.Sprintf("bench-%d-%d", run, i), testenv.TransferBody(from, to, 1))
		if r.Status != http.StatusCreated {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
}

// BenchmarkReplaySequential is the same client repeating one completed transfer.
func BenchmarkReplaySequential(b *testing.B) {
	_, key := env.Owner(b)
	from, to := env.Account(b, key, "USD"), env.Account(b, key, "USD")
	env.Fund(b, from, 10)
	env.Do(b, "POST", "/v1/transfers", key, "replayed", testenv.TransferBody(from, to, 1))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := env.Do(b, "POST", "/v1/transfers", key, "replayed", testenv.TransferBody(from, to, 1)); r.Status != http.StatusCreated {
			b.Fatalf("%d", r.Status)
		}
	}
}

// BenchmarkTutorialShape is the baseline on the same server: a workflow with two regular
// activities (post, then store the response), started without eager start, waited on.
func BenchmarkTutorialShape(b *testing.B) {
	const queue = "bench-tutorial"
	w := sdkworker.New(env.Temporal, queue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(tutorialWorkflow, workflow.RegisterOptions{Name: "TutorialTransfer"})
	w.RegisterActivityWithOptions(func(ctx context.Context) error { return nil }, activity.RegisterOptions{Name: "Post"})
	w.RegisterActivityWithOptions(func(ctx context.Context) error { return nil }, activity.RegisterOptions{Name: "Store"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	run := time.Now().UnixNano()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wr, err := env.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
			ID: fmt.Sprintf("tutorial-%d-%d", run, i), TaskQueue: queue}, "TutorialTransfer")
		if err != nil {
			b.Fatal(err)
		}
		if err := wr.Get(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
	}
}

func tutorialWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteActivity(ctx, "Post").Get(ctx, nil); err != nil {
		return err
	}
	return workflow.ExecuteActivity(ctx, "Store").Get(ctx, nil)
}
