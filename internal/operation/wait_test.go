package operation

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/idempotency"
)

// pollingRun is a workflow run whose result poll blocks until the workflow closes (close) or
// the poll's context ends, and reports which.
type pollingRun struct {
	client.WorkflowRun
	poll    context.Context // the poll's context, once polling is closed
	polling chan struct{}
	close   chan struct{}
}

func (r *pollingRun) Get(ctx context.Context, _ any) error {
	r.poll = ctx
	close(r.polling)
	select {
	case <-r.close:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A posting that answers within LocalGrace is the answer, and no result poll is made.
func TestWaitAnswersFromThePostingWithoutAPoll(t *testing.T) {
	run := &pollingRun{polling: make(chan struct{}), close: make(chan struct{})}
	posted := make(chan idempotency.Response, 1)
	posted <- idempotency.Response{Status: 201}
	resp, err := waitFor(context.Background(), run, posted)
	if err != nil || resp.Status != 201 {
		t.Fatalf("got %+v, %v; want the posting's answer", resp, err)
	}
	// A poll started in the background would begin within moments; waiting a little longer
	// cannot make a correct wait fail, only let a wrong one pass on a very busy machine.
	select {
	case <-run.polling:
		t.Fatal("polled Temporal for a result the posting had already given")
	case <-time.After(100 * time.Millisecond):
	}
}

// When the posting answers after the poll has started, the result poll is not cancelled: it is left to end when the
// workflow closes. Cancelling it while the server reads the closed history is what wedged the
// dev server's SQLite connection (docs/adr/0004-result-polls.md).
func TestWaitLeavesTheResultPollRunning(t *testing.T) {
	run := &pollingRun{polling: make(chan struct{}), close: make(chan struct{})}
	posted := make(chan idempotency.Response, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-run.polling // the poll is under way...
		posted <- idempotency.Response{}
	}()
	if _, err := waitFor(ctx, run, posted); err != nil {
		t.Fatal(err)
	}
	cancel() // as the request ends when Submit returns
	poll := run.poll
	if poll.Err() != nil {
		t.Fatalf("the result poll was cancelled when the posting answered: %v", poll.Err())
	}
	if d, ok := poll.Deadline(); !ok || time.Until(d) > time.Minute {
		t.Fatalf("the result poll has no deadline, or a later one than the wait: %v %v", d, ok)
	}
	close(run.close)
}

// waitFor is WaitResult for a minute, heard from posted, as the request that claimed it.
func waitFor(ctx context.Context, run client.WorkflowRun, posted <-chan idempotency.Response) (idempotency.Response, error) {
	return WaitResult(ctx, &Runner{SyncWait: time.Minute}, &Submission{Heard: posted, Grace: LocalGrace}, run,
		func(struct{}) idempotency.Response { return idempotency.Response{} })
}
