package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/rig/testenv"
)

// failTransfers makes n transfers fail for real: their source accounts stay locked longer than
// the transfers' retry policy allows. It returns the keys, the accounts, and the fix: releasing
// the locks.
func failTransfers(t *testing.T, n int, amount, funded int64) (ownerID, key string, keys, from, to []string, fix func()) {
	impatient := env.With(t, testenv.Options{RetryFor: time.Second})
	ownerID, key = env.Owner(t)
	var releases []func()
	for i := range n {
		from = append(from, env.Account(t, key, "USD"))
		to = append(to, env.Account(t, key, "USD"))
		env.Fund(t, from[i], funded)
		releases = append(releases, env.Hold(t, from[i]))
		keys = append(keys, fmt.Sprintf("%s-%d", strings.ToLower(t.Name()), i))
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := impatient.Do(t, "POST", "/v1/transfers", key, keys[i], testenv.TransferBody(from[i], to[i], amount))
			if r.Status != http.StatusInternalServerError {
				t.Errorf("transfer %d: %d %s, want 500 transfer-failed", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	return ownerID, key, keys, from, to, func() {
		for _, r := range releases {
			r()
		}
	}
}

func TestRerunFailedCompletesEachTransferOnce(t *testing.T) {
	const n, amount, funded = 3, 60, 100
	_, key, keys, from, to, fix := failTransfers(t, n, amount, funded)
	testenv.WaitFor(t, "the failed runs to be visible", func() bool {
		return countWorkflows(t, "WorkflowType = 'Transfer' AND ExecutionStatus = 'Failed'") >= n
	})
	fix()

	commandsOn(t, env.URL)
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"rerun", "failed", "--since", "1h"}, &out); err != nil {
		t.Fatalf("rerun failed: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), fmt.Sprintf(": %d completed, 0 rejected, 0 started (payouts and deliveries go on), 0 credited, 0 failed again", n)) {
		t.Fatalf("report:\n%s", out.String())
	}
	for i := range n {
		if !regexp.MustCompile(`/` + regexp.QuoteMeta(keys[i]) + ` +tr_\w+ +completed`).MatchString(out.String()) {
			t.Errorf("no completed line for %s in\n%s", keys[i], out.String())
		}
		r := env.Do(t, "POST", "/v1/transfers", key, keys[i], testenv.TransferBody(from[i], to[i], amount))
		if r.Status != http.StatusCreated || r.JSON(t)["status"] != "completed" {
			t.Fatalf("transfer %d after the replay: %d %s", i, r.Status, r.Body)
		}
		if env.Balance(t, from[i]) != funded-amount || env.Balance(t, to[i]) != amount ||
			env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1`, r.JSON(t)["id"]) != 2 {
			t.Fatalf("transfer %d did not move its money exactly once", i)
		}
	}
	env.Reconcile(t)

	// Again: nothing left to do; each is skipped, its latest run having completed.
	out.Reset()
	if err := dispatch(context.Background(), []string{"rerun", "failed"}, &out); err != nil ||
		!strings.Contains(out.String(), ": 0 completed, 0 rejected, 0 started (payouts and deliveries go on), 0 credited, 0 failed again") {
		t.Fatalf("second replay: %v\n%s", err, out.String())
	}
	for i := range n {
		if !regexp.MustCompile(`/` + regexp.QuoteMeta(keys[i]) + ` +tr_\w+ +skipped`).MatchString(out.String()) {
			t.Errorf("%s not skipped in\n%s", keys[i], out.String())
		}
	}
}

// rerun failed --dry-run lists a failed transfer's run and starts nothing: its latest run is still
// the failed one and no money moved, though a run started now would complete (its lock is
// released). The real rerun then completes it.
func TestRerunFailedDryRunStartsNothing(t *testing.T) {
	const amount, funded = 40, 100
	ownerID, _, keys, from, to, fix := failTransfers(t, 1, amount, funded)
	id := "transfer/" + ownerID + "/" + keys[0]
	testenv.WaitFor(t, "the failed run to be visible", func() bool {
		return countWorkflows(t, "WorkflowId = '"+id+"' AND ExecutionStatus = 'Failed'") == 1
	})
	failedRun := env.LatestRun(t, id)
	fix()

	commandsOn(t, env.URL)
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"rerun", "failed", "--since", "1h", "--dry-run"}, &out); err != nil {
		t.Fatalf("rerun failed --dry-run: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(regexp.QuoteMeta(id)+` +tr_\w+ +would-run +its latest run is Failed`).MatchString(out.String()) ||
		!strings.Contains(out.String(), "nothing was started") {
		t.Fatalf("%s is not listed as one that would run again:\n%s", id, out.String())
	}
	time.Sleep(2 * time.Second) // a run started by mistake would have posted by now
	if run := env.LatestRun(t, id); run != failedRun {
		t.Fatalf("--dry-run started run %s (the failed one: %s)", run, failedRun)
	}
	if env.Balance(t, from[0]) != funded || env.Balance(t, to[0]) != 0 {
		t.Fatalf("--dry-run moved money: %d and %d", env.Balance(t, from[0]), env.Balance(t, to[0]))
	}

	out.Reset()
	if err := dispatch(context.Background(), []string{"rerun", "failed", "--since", "1h"}, &out); err != nil ||
		!regexp.MustCompile(regexp.QuoteMeta(id)+` +tr_\w+ +completed`).MatchString(out.String()) {
		t.Fatalf("the rerun after the dry run: %v\n%s", err, out.String())
	}
	if env.Balance(t, from[0]) != funded-amount || env.Balance(t, to[0]) != amount {
		t.Fatalf("after the rerun: %d and %d", env.Balance(t, from[0]), env.Balance(t, to[0]))
	}
}

func countWorkflows(t *testing.T, query string) int {
	t.Helper()
	resp, err := env.Temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Query: query})
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.GetCount())
}

// `replay history` reports each committed history as replaying (workflows' tests check them too).
func TestReplayHistoryCommand(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testenv.HistoriesDir(), "*.json"))
	if len(files) < 4 {
		t.Fatalf("%d histories under %s, want the completed, rejected, failed and re-run paths", len(files), testenv.HistoriesDir())
	}
	t.Setenv("PAYMENTS_CODEC_KEYS", testenv.CodecKeys) // the keys the encrypted ones were recorded with
	var out bytes.Buffer
	if err := dispatch(context.Background(), append([]string{"replay", "history"}, files...), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Count(out.String(), "ok ") != len(files) {
		t.Fatalf("report:\n%s", out.String())
	}
}

func TestReplayHistoryReportsNonDeterminism(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken.json")
	// A history whose recorded first command is a timer: the current code schedules a local
	// activity marker instead, so replay must fail and say where.
	src, err := os.ReadFile(filepath.Join(testenv.HistoriesDir(), "completed-v0.json"))
	if err != nil {
		t.Fatal(err)
	}
	mutated := strings.Replace(string(src), "EVENT_TYPE_MARKER_RECORDED", "EVENT_TYPE_TIMER_STARTED", 1)
	if err := os.WriteFile(broken, []byte(mutated), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = dispatch(context.Background(), []string{"replay", "history", broken}, &out)
	if !errors.Is(err, errExitOne) || !strings.Contains(out.String(), "FAIL") {
		t.Fatalf("err %v\n%s", err, out.String())
	}
}

// A history file that cannot be read (missing, not JSON, not a history) is a usage error (exit 2)
// that says so, not a build that would break running workflows; no file is replayed.
func TestReplayHistoryOfAnUnreadableFileIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	good, _ := filepath.Glob(filepath.Join(testenv.HistoriesDir(), "*.json"))
	files := map[string]string{"missing.json": "", "truncated.json": `{"events":[{"eventId":"1",`, "empty.json": `{}`,
		"text.json": "not a history"}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if content != "" {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		err := dispatch(context.Background(), []string{"replay", "history", good[0], path}, &out)
		var usage usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), path+" is not a workflow history") {
			t.Errorf("%s: %v, want a usage error naming the file", name, err)
		}
		if out.Len() > 0 {
			t.Errorf("%s: replayed anyway:\n%s", name, out.String())
		}
	}
}

// TestRecordHistories writes real histories of each path of the transfer workflow. Run it when
// the workflow changes, with a new version suffix (testenv.RecordCommand), and keep the old
// files: they are what running workflows look like.
func TestRecordHistories(t *testing.T) {
	testenv.SkipUnlessRecording(t)
	ownerID, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, from, 100)
	if r := env.Do(t, "POST", "/v1/transfers", key, "rec-completed", testenv.TransferBody(from, to, 10)); r.Status != http.StatusCreated {
		t.Fatal(r.Status)
	}
	if r := env.Do(t, "POST", "/v1/transfers", key, "rec-rejected", testenv.TransferBody(from, to, 1_000)); r.Status != http.StatusUnprocessableEntity {
		t.Fatal(r.Status)
	}
	env.RecordHistory(t, testenv.TransferHistory, "completed", "transfer/"+ownerID+"/rec-completed", "")
	env.RecordHistory(t, testenv.TransferHistory, "rejected", "transfer/"+ownerID+"/rec-rejected", "")

	owner, failKey, keys, fFrom, fTo, fix := failTransfers(t, 1, 10, 100)
	id := "transfer/" + owner + "/" + keys[0]
	failedRun := env.LatestRun(t, id)
	fix()
	if r := env.Do(t, "POST", "/v1/transfers", failKey, keys[0], testenv.TransferBody(fFrom[0], fTo[0], 10)); r.Status != http.StatusCreated {
		t.Fatal(r.Status)
	}
	env.RecordHistory(t, testenv.TransferHistory, "failed", id, failedRun)
	env.RecordHistory(t, testenv.TransferHistory, "rerun", id, "")
}

// `payments bench` runs every scenario against a running API, prints the table and the targets,
// and leaves a ledger that reconciles. (A smoke test: the numbers are for docs/benchmarks.md.)
func TestBenchCommand(t *testing.T) {
	commandsOn(t, env.URL)
	out := filepath.Join(t.TempDir(), "bench.json")
	var b bytes.Buffer
	err := dispatch(context.Background(), []string{"bench", "--api", env.Server.URL, "--clients", "2",
		"--duration", "300ms", "--sequential", "200ms", "--json", out, "--watch-pid", fmt.Sprint(os.Getpid())}, &b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	for _, want := range []string{"| new, spread | 2 |", "| replay | 1 |", "| baseline: tutorial | 2 |", "History events per workflow:",
		"| baseline: empty started | 1 |", "| baseline: empty update-with-start | 2 |", "empty (update-with-start)",
		"sequential new p50 / floor", "Peak RSS of pid", "CPU used during each phase", "CPU per request, in ms"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("no %q in\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "first error") {
		t.Fatalf("errors during the run:\n%s", b.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
	env.Reconcile(t)
}
