package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"

	"github.com/payments/payments/internal/idempotency"
)

// CleanupResult is what one cleanup pass did.
type CleanupResult struct {
	Deleted int // expired records deleted: their keys are new again
	Skipped int // expired records whose workflow is still running, left for the next pass
}

const cleanupBatch = 200

// DeleteExpiredRecords deletes the idempotency records whose replay window has passed. For a
// transfer it first deletes the scope's closed workflow executions: the workflow ID is a
// function of the scope, and the ID reuse policy would otherwise answer the key's next
// operation with the old run.
func (a *Activities) DeleteExpiredRecords(ctx context.Context) (CleanupResult, error) {
	var res CleanupResult
	var after idempotency.Scope
	for {
		batch, err := idempotency.Expired(ctx, a.Ledger.DB, after, cleanupBatch)
		if err != nil {
			return res, err
		}
		for _, s := range batch {
			freed, err := a.freeWorkflowID(ctx, s)
			if err != nil {
				return res, err
			}
			if !freed {
				res.Skipped++
				continue
			}
			if err := idempotency.Forget(ctx, a.Ledger.DB, s); err != nil {
				return res, err
			}
			res.Deleted++
		}
		activity.RecordHeartbeat(ctx, res)
		if len(batch) < cleanupBatch {
			return res, nil
		}
		after = batch[len(batch)-1]
	}
}

// freeWorkflowID deletes every closed execution under the workflow ID of scope s and reports
// whether the ID is free. A running execution is left alone (false).
func (a *Activities) freeWorkflowID(ctx context.Context, s idempotency.Scope) (bool, error) {
	if s.Route == idempotency.RouteAccounts {
		return true, nil // no workflow
	}
	id := s.WorkflowID()
	for range 100 {
		desc, err := a.Temporal.DescribeWorkflowExecution(ctx, id, "")
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		info := desc.GetWorkflowExecutionInfo()
		if info.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return false, nil
		}
		_, err = a.Temporal.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
			Namespace:         activity.GetInfo(ctx).WorkflowNamespace,
			WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: info.GetExecution().GetRunId()},
		})
		if err != nil && !errors.As(err, &notFound) {
			return false, err
		}
		// Deletion completes asynchronously; look again until the ID is free.
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return false, fmt.Errorf("workflow %s: still present after deleting it", id)
}
