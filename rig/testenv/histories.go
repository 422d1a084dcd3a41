package testenv

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The committed histories, under workflows/testdata/histories, are real runs of the workflows
// that every later change must still replay (workflows' TestCommittedHistoriesReplay, `payments
// replay history`). A recording is named <kind>-<path>-<version>.json: the kind of workflow, the
// path the run took through it, the version of the code that made it (payout-paid-v1.json). The
// first transfer recordings predate the kind and keep their names (completed-v0.json, …): tests
// read them by name, and a running deployment's histories look like them.

// recordVersion is the version suffix the tests record histories under; empty, they record none.
// One flag for every test package, registered once here.
var recordVersion = flag.String("record-histories", "",
	"write the histories of real runs under workflows/testdata/histories, with this version suffix (e.g. v3)")

// RecordCommand is how histories are recorded: every test package that records them.
const RecordCommand = "go test ./cmd/payments ./payouts ./deliveries ./authorizations ./schedules -run TestRecordHistories -args -record-histories=vN"

// HistoryKind is the kind of workflow a recorded history is a run of: its file name's first part.
type HistoryKind string

// The kinds of workflow the tests record histories of.
const (
	TransferHistory      HistoryKind = "transfer"
	PayoutHistory        HistoryKind = "payout"
	PayinHistory         HistoryKind = "payin"
	StatementHistory     HistoryKind = "statement"
	WebhookHistory       HistoryKind = "webhook"
	AuthorizationHistory HistoryKind = "authorization"
	ScheduledHistory     HistoryKind = "scheduled"
)

var version = regexp.MustCompile(`^v[0-9]+$`)

// HistoriesDir is the directory of the committed histories.
func HistoriesDir() string { return filepath.Join(RepoRoot(), "workflows", "testdata", "histories") }

// Recording says whether the tests run with -record-histories.
func Recording() bool { return *recordVersion != "" }

// SkipUnlessRecording skips t, a test that exists to record histories, unless the tests record.
func SkipUnlessRecording(t testing.TB) {
	t.Helper()
	if !Recording() {
		t.Skip(RecordCommand + " writes workflows/testdata/histories")
	}
}

// RecordHistory writes run runID of workflowID (its latest when empty), once it has closed, to
// HistoriesDir()/<kind>-<path>-<version>.json when the tests record, and does nothing otherwise.
// It never overwrites a file: a committed history keeps its content, and a new recording takes
// a new version.
func (e *Env) RecordHistory(t testing.TB, kind HistoryKind, path, workflowID, runID string) {
	t.Helper()
	if !Recording() {
		return
	}
	if !version.MatchString(*recordVersion) {
		t.Fatalf("-record-histories=%q: want a version suffix such as v3", *recordVersion)
	}
	file := filepath.Join(HistoriesDir(), string(kind)+"-"+path+"-"+*recordVersion+".json")
	if _, err := os.Stat(file); err == nil {
		t.Fatalf("%s exists: record under a new version", file)
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	e.WriteHistory(t, workflowID, runID, file)
}

// LatestRun is the run id of workflowID's latest run.
func (e *Env) LatestRun(t testing.TB, workflowID string) string {
	t.Helper()
	desc, err := e.Temporal.DescribeWorkflowExecution(context.Background(), workflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	return desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}
