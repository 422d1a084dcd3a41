package workflows_test

import (
	"path/filepath"
	"strings"
	"testing"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/worker"
	"github.com/payments/payments/workflows"
)

func histories(t *testing.T, pattern string) []string {
	files, _ := filepath.Glob(filepath.Join("testdata", "histories", pattern))
	if len(files) == 0 {
		t.Fatalf("no histories match %s", pattern)
	}
	return files
}

// Every committed history, from before and after each change, replays against this code.
func TestCommittedHistoriesReplay(t *testing.T) {
	for _, f := range histories(t, "*.json") {
		if err := worker.ReplayHistory(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// transferWithoutVersionGate is the "posting" status change made naively, without
// workflow.GetVersion: what a careless edit of Transfer would look like.
func transferWithoutVersionGate(ctx workflow.Context, in workflows.TransferInput) (workflows.TransferOutcome, error) {
	_ = workflow.UpsertTypedSearchAttributes(ctx, workflows.TransferStatus.ValueSet("posting"))
	return workflows.Transfer(ctx, in)
}

// The same change without its GetVersion gate breaks every history recorded before it, and the
// replay names where: this is what the committed v0 histories guard against.
func TestUngatedChangeBreaksOldHistories(t *testing.T) {
	for _, f := range histories(t, "*-v0.json") {
		r := sdkworker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(transferWithoutVersionGate, workflow.RegisterOptions{Name: "Transfer"})
		err := r.ReplayWorkflowHistoryFromJSONFile(nil, f)
		if err == nil || !strings.Contains(err.Error(), "nondeterministic") && !strings.Contains(err.Error(), "TMPRL1100") {
			t.Errorf("%s: replay against the ungated change gave %v, want a non-determinism error", f, err)
		}
	}
}
