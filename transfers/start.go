package transfers

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/outage"
	"github.com/payments/payments/workflows"
)

// start starts the run of in's transfer, or finds it: a run already there under the workflow ID
// (a concurrent duplicate's, or a completed one) is this transfer's only if its memo names the
// transfer. A run of an earlier use of the key is never joined: while it is still open (held by
// a worker that stopped, or re-opened by a UI Reset) this use waits its turn (InUseError); once
// it has closed, this use's run starts after it.
func (s *Service) start(ctx context.Context, in workflows.TransferInput) (client.WorkflowRun, error) {
	run, err := s.Temporal.ExecuteWorkflow(ctx, s.startOptions(in), workflows.Transfer, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return s.existingRun(ctx, in)
	}
	return run, temporalError(err)
}

// existingRun answers a start refused because a run holds in's workflow ID: running, or
// completed (which the reuse policy does not repeat).
func (s *Service) existingRun(ctx context.Context, in workflows.TransferInput) (client.WorkflowRun, error) {
	if run, err := s.ownRun(ctx, in); err != nil || run != nil {
		return run, err
	}
	// The latest run belongs to an earlier use of the key, whose record has expired, and it is
	// closed: start this use's run after it. The starters of this use take turns on the claim's
	// row, so exactly one of them starts it.
	var run client.WorkflowRun
	err := s.Ledger.InTx(ctx, func(tx pgx.Tx) error {
		if err := idempotency.Lock(ctx, tx, in.Scope()); err != nil {
			return err
		}
		var err error
		if run, err = s.ownRun(ctx, in); err != nil || run != nil {
			return err
		}
		opts := s.startOptions(in)
		opts.WorkflowIDReusePolicy = enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
		run, err = s.Temporal.ExecuteWorkflow(ctx, opts, workflows.Transfer, in)
		return temporalError(err)
	})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) { // an earlier use's run was re-opened meanwhile
		return nil, &InUseError{TransferID: in.TransferID, WorkflowID: in.WorkflowID, EarlierUse: true}
	}
	return run, database.Outage(err)
}

// ownRun returns the latest run under in's workflow ID if it runs in's transfer (its memo says
// so), nil if that run is a closed one of an earlier use, and an InUseError if it is a running
// one of an earlier use.
func (s *Service) ownRun(ctx context.Context, in workflows.TransferInput) (client.WorkflowRun, error) {
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
	if err != nil {
		return nil, temporalError(err)
	}
	info := desc.GetWorkflowExecutionInfo()
	switch {
	case memoTransfer(info) == in.TransferID:
		return s.Temporal.GetWorkflow(ctx, in.WorkflowID, info.GetExecution().GetRunId()), nil
	case info.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return nil, &InUseError{TransferID: in.TransferID, WorkflowID: in.WorkflowID, EarlierUse: true}
	default:
		return nil, nil
	}
}

// memoTransferID names the memo field holding the transfer a run posts.
const memoTransferID = "transfer_id"

// memoTransfer is the transfer a run posts, as its memo says.
func memoTransfer(info *workflowpb.WorkflowExecutionInfo) string {
	var id string
	if p := info.GetMemo().GetFields()[memoTransferID]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &id)
	}
	return id
}

func (s *Service) startOptions(in workflows.TransferInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:        in.WorkflowID,
		TaskQueue: workflows.TaskQueue,
		// A completed run is never repeated; a failed one may be run again under the same ID.
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		// A run already going is not joined blindly: it may be one of an earlier use of the key
		// (a run held open, or re-opened by a UI Reset). existingRun joins it only if its memo
		// names this transfer.
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		EnableEagerStart:                         s.Eager,
		TypedSearchAttributes:                    workflows.SearchAttributes(in),
		StaticSummary:                            workflows.Summary(in),
		Memo:                                     map[string]any{memoTransferID: in.TransferID},
	}
}

// temporalError marks err as a Temporal outage when it says Temporal could not be reached or
// could not do the work now; any other refusal (a bad request, a namespace without the search
// attributes) is returned as it is, an error of this service, not a reason to retry.
func temporalError(err error) error {
	if err == nil {
		return nil
	}
	var (
		unavailable   *serviceerror.Unavailable
		nsUnavailable *serviceerror.NamespaceUnavailable
		deadline      *serviceerror.DeadlineExceeded
		exhausted     *serviceerror.ResourceExhausted
		internal      *serviceerror.Internal
		aborted       *serviceerror.Aborted
		canceled      *serviceerror.Canceled
	)
	if errors.As(err, &unavailable) || errors.As(err, &nsUnavailable) || errors.As(err, &deadline) ||
		errors.As(err, &exhausted) || errors.As(err, &internal) || errors.As(err, &aborted) ||
		errors.As(err, &canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return outage.Of("Temporal", err)
	}
	return err
}

// isWorkflowFailure reports whether err is a run's end without a result: failed, timed out,
// terminated or canceled.
func isWorkflowFailure(err error) bool {
	var wfErr *temporal.WorkflowExecutionError
	return errors.As(err, &wfErr)
}
