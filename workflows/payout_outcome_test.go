package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/payments/payments/internal/ledger"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/payments/payments/workflows"
)

// resultOf is the result a committed history's run completed with, decoded as callers decode it.
func resultOf(t *testing.T, name string) workflows.PayoutOutcome {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "histories", name))
	if err != nil {
		t.Fatal(err)
	}
	var h historypb.History
	if err := protojson.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	last := h.GetEvents()[len(h.GetEvents())-1].GetWorkflowExecutionCompletedEventAttributes()
	if last == nil {
		t.Fatalf("%s: the run did not complete", name)
	}
	var out workflows.PayoutOutcome
	if err := converter.GetDefaultDataConverter().FromPayloads(last.GetResult(), &out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// A payout's result says where it ended at its top (status, payout_id), the first answer apart
// (first_answer); the results of runs that ended before, {"Status", "Response"}, read the same.
func TestPayoutOutcomeReadsOldAndNewResults(t *testing.T) {
	for _, c := range []struct {
		file   string
		status ledger.PayoutStatus
		id     bool // the old shape had no payout id
	}{
		{"payout-returned-v1.json", ledger.PayoutReturned, false},
		{"payout-paid-v1.json", ledger.PayoutPaid, false},
		{"payout-last-question-unanswered-v2.json", ledger.PayoutReturned, true},
		{"payout-cancel-refused-v2.json", ledger.PayoutPaid, true},
	} {
		out := resultOf(t, c.file)
		if out.Status != c.status || out.FirstAnswer.Status != 201 || len(out.FirstAnswer.Body) == 0 || (out.PayoutID != "") != c.id {
			t.Errorf("%s: %+v, want %s with its first answer (201)", c.file, out, c.status)
		}
	}
}
