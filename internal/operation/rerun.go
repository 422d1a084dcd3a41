package operation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// Rerun is what running one workflow again did.
type Rerun struct {
	WorkflowID string
	ID         string // what the run makes: a transfer, a payout, a payin
	// completed, rejected, started, failed, skipped (a later run already finished it), error;
	// under DryRun, would-run
	Outcome string
	Detail  string
}

// WouldRun is the outcome of a workflow Restart would have started, under DryRun.
const WouldRun = "would-run"

type dryRunKey struct{}

// DryRun is ctx under which Restart reports what it would start and starts nothing. A context
// rather than a parameter: every service's RerunFailed goes through Restart.
func DryRun(ctx context.Context) context.Context { return context.WithValue(ctx, dryRunKey{}, true) }

func isDryRun(ctx context.Context) bool { return ctx.Value(dryRunKey{}) != nil }

// RerunFailed runs again (Restart) every workflow of type workflowType whose latest run failed,
// was terminated or timed out (closed after since, unless zero), in turn, and reports each:
// finish, when not nil, waits for a run started again and completes its report.
func RerunFailed(ctx context.Context, c client.Client, dc converter.DataConverter, workflowType string, since time.Time,
	decode func(input func(valuePtr any) error) (Operation, error), finish func(client.WorkflowRun, *Rerun), report func(Rerun)) error {
	return eachFailed(ctx, c, workflowType, since, func(id string) {
		run, r := Restart(ctx, c, dc, id, decode)
		if run != nil && finish != nil {
			finish(run, &r)
		}
		report(r)
	})
}

// eachFailed calls rerun for every workflow RerunFailed runs again, once each, in turn.
func eachFailed(ctx context.Context, c client.Client, workflowType string, since time.Time, rerun func(workflowID string)) error {
	query := fmt.Sprintf("WorkflowType = '%s' AND (ExecutionStatus = 'Failed' OR ExecutionStatus = 'Terminated' OR ExecutionStatus = 'TimedOut')", workflowType)
	if !since.IsZero() {
		query += fmt.Sprintf(" AND CloseTime >= '%s'", since.UTC().Format(time.RFC3339))
	}
	return eachListed(ctx, c, query, "failed "+workflowType, rerun)
}

// EachRunning calls f for every workflow of type workflowType with a run going, as Temporal's
// visibility lists them, among those filter (a visibility query, or "") admits.
func EachRunning(ctx context.Context, c client.Client, workflowType, filter string, f func(workflowID string)) error {
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", workflowType)
	if filter != "" {
		query += " AND " + filter
	}
	return eachListed(ctx, c, query, "running "+workflowType, f)
}

// eachListed calls f once for each workflow ID Temporal's visibility lists for query (what, in
// an error), page after page.
func eachListed(ctx context.Context, c client.Client, query, what string, f func(workflowID string)) error {
	seen := map[string]bool{}
	var page []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: page, PageSize: 1000})
		if err != nil {
			return TemporalError(fmt.Errorf("listing %s workflows: %w", what, err))
		}
		for _, ex := range resp.GetExecutions() {
			if id := ex.GetExecution().GetWorkflowId(); !seen[id] {
				seen[id] = true
				f(id)
			}
		}
		if page = resp.GetNextPageToken(); len(page) == 0 {
			return nil
		}
	}
}

// Restart starts workflowID's latest run again with its input, if that run failed, was
// terminated or timed out (and ctx is not DryRun); decode reads the input and returns the
// operation. The new run is returned, or nil with the Rerun saying why nothing was started.
func Restart(ctx context.Context, c client.Client, dc converter.DataConverter, workflowID string, decode func(input func(valuePtr any) error) (Operation, error)) (client.WorkflowRun, Rerun) {
	r := Rerun{WorkflowID: workflowID, Outcome: "error"}
	desc, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		r.Detail = err.Error()
		return nil, r
	}
	info := desc.GetWorkflowExecutionInfo()
	op, err := decode(func(valuePtr any) error {
		return startInput(ctx, c, dc, workflowID, info.GetExecution().GetRunId(), valuePtr)
	})
	if err != nil {
		r.Detail = err.Error()
		return nil, r
	}
	r.ID = op.ID
	if st := info.GetStatus(); !rerunnable(st) {
		r.Outcome, r.Detail = "skipped", "its latest run is "+st.String()
		return nil, r
	} else if isDryRun(ctx) {
		r.Outcome, r.Detail = WouldRun, "its latest run is "+st.String()+"; nothing started (--dry-run)"
		return nil, r
	}
	run, err := c.ExecuteWorkflow(ctx, op.StartOptions(), op.Workflow, op.Input)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		r.Outcome, r.Detail = "skipped", "another run took it meanwhile"
		return nil, r
	}
	if err != nil {
		r.Detail = err.Error()
		return nil, r
	}
	r.Outcome = "started"
	return run, r
}

// rerunnable reports whether a run in status st ended without finishing its work (docs/contract.md);
// a canceled run was ended on purpose, and what it left behind is the recovery pass's.
func rerunnable(st enums.WorkflowExecutionStatus) bool {
	return st == enums.WORKFLOW_EXECUTION_STATUS_FAILED || st == enums.WORKFLOW_EXECUTION_STATUS_TERMINATED ||
		st == enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT
}

// startInput reads the input a run was started with from its first history event, with dc.
func startInput(ctx context.Context, c client.Client, dc converter.DataConverter, workflowID, runID string, valuePtr any) error {
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return errors.New("empty history")
	}
	first, err := it.Next()
	if err != nil {
		return err
	}
	attrs := first.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return errors.New("the history does not start with WorkflowExecutionStarted")
	}
	return orDefault(dc).FromPayloads(attrs.GetInput(), valuePtr)
}
