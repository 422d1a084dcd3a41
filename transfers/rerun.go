package transfers

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// RerunFailed runs again, with the same input, the transfer workflows whose latest run failed,
// was terminated or timed out, reporting each outcome. The ledger posts each transfer at most once.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	decode := func(input func(any) error) (operation.Operation, error) {
		var in workflows.TransferInput
		err := input(&in)
		return s.operation(in), err
	}
	return operation.RerunFailed(ctx, s.Runner.Client, s.Runner.Converter, "Transfer", since, decode, func(run client.WorkflowRun, r *operation.Rerun) {
		var out workflows.TransferOutcome
		if err := run.Get(ctx, &out); err != nil {
			r.Outcome, r.Detail = "failed", err.Error()
			return
		}
		r.Outcome, r.Detail = string(out.Status), fmt.Sprintf("HTTP %d, stored for replay", out.Response.Status)
	}, report)
}
