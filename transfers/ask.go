package transfers

import (
	"context"
	"crypto/rand"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/workflows"
)

// startAndAsk runs the transfer from a process without a worker (`payments api`): one call
// starts the run, or joins the one already there, and asks it for its answer (Update-With-Start,
// workflows.AnswerUpdate), which the run gives as soon as the posting commits. Concurrent
// duplicates each ask the one run and get its one answer. Compared
// with a start and a result poll, the answer comes one task dispatch sooner and does not wait
// for the run to close (docs/adr/0008-cluster.md).
//
// Every other end of the call (the run refuses to answer for another use of the key, the run
// closed before it answered, a worker without the update, Temporal unreachable, the client
// gone) goes the way a start and a result poll go: it finds this transfer's run or starts it
// (telling an earlier use's run from this one's), so the run has started whatever the client
// does, and answers from the result or the ledger.
func (s *Service) startAndAsk(ctx, startCtx context.Context, in workflows.TransferInput, answer Answer, created bool) (Answer, error) {
	waitCtx, cancel := context.WithTimeout(ctx, s.SyncWait)
	defer cancel()
	out, runID, err := s.ask(waitCtx, in)
	switch {
	case err == nil && out.Status.Final():
		answer.Response = out.Response
		return answer, nil
	case err == nil: // the run could not post it
		return s.ended(ctx, in, runID, answer)
	}
	// The run this call started or joined, if it got that far. Not started again when it has
	// closed: a run terminated while the caller waited is answered as failed, as it would be to
	// a result poll, and runs again only when the request is sent again.
	run, err := s.operation(in).Find(startCtx)
	if err == nil && run == nil {
		run, err = s.start(startCtx, in)
	}
	if err != nil {
		return answer, err
	}
	resp, err := wait(waitCtx, s.SyncWait, run, nil, 0) // what is left of the one wait
	if err == nil {
		answer.Response = resp
		return answer, nil
	}
	return s.afterWait(ctx, in, run, answer, created, err)
}

// updateID names one request's update. It is never the same twice: the server answers an update
// ID the latest run has already answered with that answer, even when that run has failed, and
// a request after a failed run must start the run again (the ID reuse policy), not be told
// again that it failed.
func updateID(transferID string) string {
	return transferID + "/" + rand.Text()
}

// ask sends the Update-With-Start and returns the run's outcome and run ID.
func (s *Service) ask(ctx context.Context, in workflows.TransferInput) (workflows.TransferOutcome, string, error) {
	opts := s.operation(in).StartOptions()
	// Join the run already there, if any: the update's validator refuses it when it posts
	// another transfer, and the start's ID reuse policy still never repeats a completed run.
	opts.WorkflowIDConflictPolicy = enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	start := s.Temporal.NewWithStartWorkflowOperation(opts, workflows.Transfer, in)
	h, err := s.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: workflows.AnswerUpdate, UpdateID: updateID(in.TransferID), Args: []any{in.TransferID},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var out workflows.TransferOutcome
	if err != nil {
		return out, "", err
	}
	err = h.Get(ctx, &out)
	return out, h.RunID(), err
}
