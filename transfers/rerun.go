package transfers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/payments/payments/workflows"
)

// Rerun is what running one failed transfer workflow again did.
type Rerun struct {
	WorkflowID string
	TransferID string
	Outcome    string // completed, rejected, failed, skipped (a later run already finished it), error
	Detail     string
}

// RerunFailed finds the transfer workflows whose latest run failed, was terminated or timed out
// (and closed after since, when since is not zero) and runs each again under the same workflow
// ID with the same input, one at a time, reporting each outcome as it is known. The ledger posts
// each transfer at most once however often this runs.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(Rerun)) error {
	query := "WorkflowType = 'Transfer' AND (ExecutionStatus = 'Failed' OR ExecutionStatus = 'Terminated' OR ExecutionStatus = 'TimedOut')"
	if !since.IsZero() {
		query += fmt.Sprintf(" AND CloseTime >= '%s'", since.UTC().Format(time.RFC3339))
	}
	seen := map[string]bool{}
	var page []byte
	for {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: page})
		if err != nil {
			return fmt.Errorf("listing failed transfers: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			if id := ex.GetExecution().GetWorkflowId(); !seen[id] {
				seen[id] = true
				report(s.rerun(ctx, id))
			}
		}
		if page = resp.GetNextPageToken(); len(page) == 0 {
			return nil
		}
	}
}

func (s *Service) rerun(ctx context.Context, workflowID string) Rerun {
	r := Rerun{WorkflowID: workflowID, Outcome: "error"}
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	info := desc.GetWorkflowExecutionInfo()
	in, err := s.startInput(ctx, workflowID, info.GetExecution().GetRunId())
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	r.TransferID = in.TransferID
	if st := info.GetStatus(); !rerunnable(st) {
		r.Outcome, r.Detail = "skipped", "its latest run is "+st.String()
		return r
	}
	run, err := s.Temporal.ExecuteWorkflow(ctx, s.operation(in).StartOptions(), workflows.Transfer, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		r.Outcome, r.Detail = "skipped", "another run completed it meanwhile"
		return r
	}
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	var out workflows.TransferOutcome
	if err := run.Get(ctx, &out); err != nil {
		r.Outcome, r.Detail = "failed", err.Error()
		return r
	}
	r.Outcome, r.Detail = string(out.Status), fmt.Sprintf("HTTP %d, stored for replay", out.Response.Status)
	return r
}

// rerunnable reports whether a latest run in status st ended without finishing its work, which
// the workflow ID reuse policy lets a new run under the same ID do.
func rerunnable(st enums.WorkflowExecutionStatus) bool {
	return st == enums.WORKFLOW_EXECUTION_STATUS_FAILED || st == enums.WORKFLOW_EXECUTION_STATUS_TERMINATED ||
		st == enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT
}

// startInput reads the input a run was started with from its first history event.
func (s *Service) startInput(ctx context.Context, workflowID, runID string) (workflows.TransferInput, error) {
	var in workflows.TransferInput
	it := s.Temporal.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return in, errors.New("empty history")
	}
	first, err := it.Next()
	if err != nil {
		return in, err
	}
	attrs := first.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return in, errors.New("the history does not start with WorkflowExecutionStarted")
	}
	return in, converter.GetDefaultDataConverter().FromPayloads(attrs.GetInput(), &in)
}
