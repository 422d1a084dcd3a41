package workflows_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/rig/testenv"
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
		if err := worker.ReplayHistory(f, testenv.Keys); err != nil {
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

// A transfer's or a payout's input, as each committed history holds it, reads into its input
// type and writes back the same bytes: the types the services build the input from (the ledger's
// Posting and PayoutHold) keep the shape runs started with.
func TestCommittedInputsKeepTheirShape(t *testing.T) {
	for _, f := range histories(t, "*.json") {
		h, err := client.HistoryFromJSON(mustOpen(t, f), client.HistoryJSONOptions{})
		if err != nil || len(h.GetEvents()) == 0 || h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes() == nil {
			t.Fatalf("%s: no start event (%v)", f, err)
		}
		start := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
		var in any
		switch start.GetWorkflowType().GetName() {
		case "Transfer":
			in = new(workflows.TransferInput)
		case "Payout":
			in = new(workflows.PayoutInput)
		default:
			continue
		}
		// A history recorded since payloads are sealed holds them encrypted: open them first.
		payloads, err := codec.Codec{Ring: testenv.Keys}.Decode(start.GetInput().GetPayloads())
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		held := payloads[0].GetData()
		if err := json.Unmarshal(held, in); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if again, _ := json.Marshal(in); !sameFields(held, again) {
			t.Errorf("%s: the input\n%s\nwrites back as\n%s", f, held, again)
		}
	}
}

func mustOpen(t *testing.T, file string) *os.File {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// sameFields reports whether two JSON objects hold the same fields with the same values, a
// duration written as nanoseconds (before config.Duration) and as a string being the same.
func sameFields(a, b []byte) bool {
	var x, y map[string]json.RawMessage
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil || len(x) != len(y) {
		return false
	}
	for k, v := range x {
		var d, e config.Duration
		if w, ok := y[k]; !ok || !bytes.Equal(v, w) && (json.Unmarshal(v, &d) != nil || json.Unmarshal(w, &e) != nil || d != e) {
			return false
		}
	}
	return true
}

// A history written with the payload codec replays with the keys it was sealed with, and without
// them does not even decode: what Temporal keeps of a run is not readable without the keys.
func TestEncryptedHistoryReplaysWithItsKeysOnly(t *testing.T) {
	const encrypted = "webhook-gave-up-v5.json" // recorded under testenv.CodecKeys
	f := histories(t, encrypted)[0]
	if err := worker.ReplayHistory(f, testenv.Keys); err != nil {
		t.Fatalf("%s with its keys: %v", f, err)
	}
	if err := worker.ReplayHistory(f, nil); err == nil {
		t.Fatalf("%s replayed without its keys", f)
	}
}
