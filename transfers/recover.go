package transfers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// ResolveStale resolves the transfers pending for longer than olderThan (workflows.StaleAfter),
// so that no claim stays pending for ever and no key stays bound to a request nobody runs. A
// transfer's own run settles it within PAYMENTS_TRANSFER_RETRY_FOR, so one still pending is a
// claim whose workflow never started (the API died between the claim and the start, or
// Temporal was unreachable and the client never retried) or whose run ended without a word to
// the ledger (terminated by an operator):
//   - no run of the transfer exists: its run is started (the request was valid and accepted; the
//     client was told to retry, or never heard back);
//   - its run is still open: it is left to finish;
//   - a run of an earlier use of its key is still open: the claim is withdrawn (the client was
//     told 409, nothing done, or never heard back);
//   - its run ended without posting (terminated, timed out): the transfer is marked failed, as a
//     failed run would have, and the same request (or `payments rerun failed`) runs it again.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (activities.StaleResult, error) {
	var res activities.StaleResult
	var errs []error
	err := s.Ledger.StalePending(ctx, olderThan, func(page []ledger.Transfer) error {
		for _, t := range page {
			scope, ok := idempotency.ScopeOf(t.WorkflowID)
			if ok {
				var err error
				if scope, ok, err = idempotency.Resolve(ctx, s.Ledger.DB, scope, t.ID); err != nil {
					res.Errors++
					errs = append(errs, fmt.Errorf("transfer %s (%s): %w", t.ID, t.WorkflowID, err))
					continue
				}
			}
			if !ok {
				res.Skipped++
				continue
			}
			in := s.input(requestOf(scope, t), t.ID)
			outcome, err := s.resolve(ctx, in)
			switch {
			case err != nil: // one claim that cannot be resolved now does not hold up the others
				res.Errors++
				errs = append(errs, fmt.Errorf("transfer %s (%s): %w", t.ID, t.WorkflowID, err))
			case outcome == "started":
				res.Started++
			case outcome == "failed":
				res.Failed++
			case outcome == "withdrawn":
				res.Withdrawn++
			default:
				res.Running++
			}
		}
		return nil
	})
	return res, errors.Join(append(errs, err)...)
}

// resolve does what ResolveStale says for one transfer and says which: started, failed or
// running.
func (s *Service) resolve(ctx context.Context, in workflows.TransferInput) (string, error) {
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound): // no run at all under the workflow ID
	case err != nil:
		return "", operation.TemporalError(err)
	case operation.Memo(desc.GetWorkflowExecutionInfo(), memoTransferID) != in.TransferID:
		// The latest run is an earlier use's: start this one after it, unless it is still open.
	case desc.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "running", nil
	default:
		status := desc.GetWorkflowExecutionInfo().GetStatus()
		reason := "its workflow ended (" + statusWord(status) + ") before posting it; no money moved"
		run := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		if _, err := s.Ledger.MarkFailed(ctx, in.TransferID, run, reason); err != nil {
			return "", err
		}
		return "failed", nil
	}
	_, err = s.start(ctx, in)
	var inUse *InUseError
	if errors.As(err, &inUse) { // an earlier use's run is still open: the claim was withdrawn
		return "withdrawn", nil
	}
	return "started", err
}

func statusWord(st enums.WorkflowExecutionStatus) string {
	switch st {
	case enums.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "terminated"
	case enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "timed out"
	case enums.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "canceled"
	case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "completed"
	default:
		return "failed"
	}
}
