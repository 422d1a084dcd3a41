package operation

import (
	"context"
	"errors"

	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Stored is what SubmitStored needs of an operation once claimed: its run, the scope its first
// answer is stored under, how to read the operation as it stands (for a 202), and the
// InUseError a duplicate gets when the answer has not come.
type Stored[P any] struct {
	Op      Operation
	Scope   idempotency.Scope
	Pending func(context.Context) (P, error)
	InUse   *InUseError
}

// SubmitStored is Submit for an operation whose run stores its first answer and goes on long
// after it (a payout's, for days; an authorization's, until its payee decides), so that its
// result is no answer to wait for: where this process runs no worker the run is asked by Update
// (update), otherwise the answer is awaited from this process or the ledger (awaitStored).
// claimed gives the operation once c has claimed it.
func SubmitStored[P any](ctx context.Context, r *Runner, db database.Querier, c Claim, update string, claimed func() Stored[P]) (Answer[P], error) {
	return Submit(ctx, r, c, func(sub *Submission, answer Answer[P]) Ending[P, idempotency.Response] {
		st := claimed()
		return Ending[P, idempotency.Response]{
			Op: st.Op, Update: update,
			Asked: func(resp idempotency.Response, _ string) (Answer[P], error) {
				answer.Response = resp
				return answer, nil
			},
			Await: func(waitCtx context.Context, _ client.WorkflowRun) (Answer[P], error) {
				return awaitStored(ctx, waitCtx, r, db, sub, answer, st)
			},
		}
	})
}

// awaitStored answers s with its operation's first answer, heard in this process or read from
// the ledger (WaitStored), while waitCtx lasts. When it has not come, the first request gets a
// 202 with the operation as it stands and a duplicate gets st.InUse, unless the client (ctx) has
// gone.
func awaitStored[P any](ctx, waitCtx context.Context, r *Runner, db database.Querier, s *Submission, answer Answer[P], st Stored[P]) (Answer[P], error) {
	resp, err := WaitStored(waitCtx, r, db, st.Scope, s)
	switch {
	case err == nil:
		answer.Response = resp
		return answer, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		p, err := st.Pending(ctx)
		if err != nil {
			return answer, database.Outage(err)
		}
		if s.Created {
			answer.Pending = &p // 202: accepted, its money not held yet
			return answer, nil
		}
		return answer, st.InUse
	default:
		return answer, database.Outage(err)
	}
}
