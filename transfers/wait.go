package transfers

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/workflows"
)

// localGrace is how long the request that started a transfer listens only for the posting in
// this process before it also polls Temporal for the workflow's result. Under serve the posting
// nearly always runs here (eager start), within milliseconds when the machine is not
// overloaded, so most transfers cost no result poll at all. A run elsewhere is answered up to
// localGrace later. A duplicate polls at once: the posting it waits for may have committed
// before it began to listen.
const localGrace = time.Second

// wait returns the answer of run's transfer, from the workflow's result or from the posting in
// this process (posted), whichever comes first, for at most syncWait and while ctx lasts; for
// grace it listens only for the posting. A result poll, once started, is never cancelled
// because the posting answered: it ends by itself, moments later when the workflow closes (or
// at the deadline). Cancelling it while the server reads the closed history is what wedges the
// dev server's single SQLite connection ("interrupted (9)", docs/adr/0004-result-polls.md).
func wait(ctx context.Context, syncWait time.Duration, run client.WorkflowRun, posted <-chan idempotency.Response, grace time.Duration) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	if ctx.Err() != nil || posted == nil { // a caller already gone, or no worker in this process
		var out workflows.TransferOutcome
		err := run.Get(ctx, &out)
		return out.Response, err
	}
	if grace > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case r := <-posted:
			return r, nil
		case <-ctx.Done():
			return idempotency.Response{}, ctx.Err()
		case <-timer.C:
		}
	}
	select {
	case r := <-posted:
		return r, nil
	case r := <-poll(ctx, run):
		return r.out.Response, r.err
	case <-ctx.Done(): // the poll has the same deadline; this is the caller going away
		return idempotency.Response{}, ctx.Err()
	}
}

type polled struct {
	out workflows.TransferOutcome
	err error
}

// poll gets run's result in the background, with ctx's deadline but not its cancellation.
func poll(ctx context.Context, run client.WorkflowRun) <-chan polled {
	pollCtx, cancel := context.WithoutCancel(ctx), func() {}
	if deadline, ok := ctx.Deadline(); ok {
		pollCtx, cancel = context.WithDeadline(pollCtx, deadline)
	}
	done := make(chan polled, 1)
	go func() {
		defer cancel()
		var r polled
		r.err = run.Get(pollCtx, &r.out)
		done <- r
	}()
	return done
}
