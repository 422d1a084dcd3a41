package transfers

import (
	"context"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// memoTransferID names the memo field holding the transfer a run posts.
const memoTransferID = "transfer_id"

// start starts the run of in's transfer, or finds it (operation.Operation.Start).
func (s *Service) start(ctx context.Context, in workflows.TransferInput) (client.WorkflowRun, error) {
	return s.operation(in).Start(ctx)
}

func (s *Service) operation(in workflows.TransferInput) operation.Operation {
	return operation.Operation{
		Client: s.Temporal,
		Options: client.StartWorkflowOptions{
			ID:        in.WorkflowID,
			TaskQueue: workflows.TaskQueue,
			// A completed run is never repeated; a failed one may be run again under the same ID.
			WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
			EnableEagerStart:      s.Eager,
			TypedSearchAttributes: workflows.SearchAttributes(in),
			StaticSummary:         workflows.Summary(in),
			Memo:                  workflows.MetadataMemo(in.Metadata),
		},
		Workflow: workflows.Transfer,
		Input:    in,
		MemoKey:  memoTransferID,
		ID:       in.TransferID,
		Lock:     s.Ledger.LockClaim(in.Scope()),
		Unclaim:  func(ctx context.Context) error { return s.Ledger.Unclaim(ctx, in.Scope(), in.TransferID) },
	}
}
