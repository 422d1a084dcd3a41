// Package faults holds the slow tests that break things on purpose: a worker killed between its
// ledger commit and telling Temporal, PostgreSQL cut off under load, the Temporal server
// restarted mid-flight. Each records every answer the API gives, during the fault too, shows
// that the fault happened, and ends with the ledger agreeing with the answers and the design:
// each transfer posted once, under one workflow run, and the ledger reconciled.
// `make test-faults` runs them alone; `make test` runs them too.
package outages

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/rig/testenv"
)

// planned is one transfer a test sends under its own key, and the outcome its design
// guarantees whatever the order the postings run in: completed, or rejected for insufficient
// funds.
type planned struct {
	key, from, to string
	amount        int64
	rejected      bool
}

func (tr planned) body() string { return testenv.TransferBody(tr.from, tr.to, tr.amount) }

// pairs opens n pairs of accounts for a new owner, funds each source with funded and returns
// one transfer of amount per pair (amount <= funded: each must complete), keyed prefix-i.
func pairs(t *testing.T, env *testenv.Env, prefix string, n int, amount, funded int64) (ownerID, apiKey string, ts []planned, funding map[string]int64) {
	ownerID, apiKey = env.Owner(t)
	funding = map[string]int64{}
	for i := range n {
		from, to := env.Account(t, apiKey, "USD"), env.Account(t, apiKey, "USD")
		env.Fund(t, from, funded)
		funding[from], funding[to] = funded, 0
		ts = append(ts, planned{key: fmt.Sprintf("%s-%d", prefix, i), from: from, to: to, amount: amount})
	}
	return ownerID, apiKey, ts, funding
}

// answers records every answer to every attempt of every transfer, checking each against the
// contract as it arrives: a final answer is 201 (the transfer completed) or 422
// insufficient-funds, and every final answer for a key is byte for byte the first one; the
// only answers that are not final are 503 service-unavailable with Retry-After, 202 pending
// with Location and 409 idempotency-key-in-use with Retry-After. Anything else fails the test.
type answers struct {
	mu     sync.Mutex
	phase  string                        // what the test is doing to the system, set by the test
	all    map[string][]testenv.Response // every answer, by key, in the order they came
	final  map[string]testenv.Response   // the first final answer, by key
	counts map[tally]int                 // how many answers of each kind in each phase
}

// tally is a kind of answer: its status and problem type (or the transfer status its body
// reports), in a phase of the test.
type tally struct {
	phase  string
	status int
	kind   string
}

func newAnswers(phase string) *answers {
	return &answers{phase: phase, all: map[string][]testenv.Response{}, final: map[string]testenv.Response{}, counts: map[tally]int{}}
}

func (a *answers) setPhase(p string) { a.mu.Lock(); a.phase = p; a.mu.Unlock() }

// count is how many answers came with status during phase.
func (a *answers) count(phase string, status int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for k, c := range a.counts {
		if k.phase == phase && k.status == status {
			n += c
		}
	}
	return n
}

// add records r, an answer to tr, and says whether it is final. An answer the contract does not
// allow fails t (without stopping it: clients call add from goroutines) and counts as final, so
// that nobody retries after it.
func (a *answers) add(t *testing.T, tr planned, r testenv.Response) (final bool) {
	t.Helper()
	kind, final, problem := testenv.ClassifyTransfer(r, tr.from, tr.to, tr.amount)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.all[tr.key] = append(a.all[tr.key], r)
	a.counts[tally{a.phase, r.Status, kind}]++
	if problem != "" {
		t.Errorf("%s, answer %d (%s): %s: %d (Content-Type %q, Retry-After %q, Location %q) %s", tr.key, len(a.all[tr.key]), a.phase,
			problem, r.Status, r.Header.Get("Content-Type"), r.Header.Get("Retry-After"), r.Header.Get("Location"), r.Body)
		return true
	}
	if !final {
		return false
	}
	if first, ok := a.final[tr.key]; !ok {
		a.final[tr.key] = r
	} else if testenv.Differ(first, r) {
		t.Errorf("%s: final answers differ:\n%d %s\n%d %s", tr.key, first.Status, first.Body, r.Status, r.Body)
	}
	return true
}

// send sends tr with its key until it has a final answer, as a client that retries does,
// recording every answer; it gives up, failing t, at deadline.
func (a *answers) send(t *testing.T, env *testenv.Env, apiKey string, tr planned, deadline time.Time) {
	t.Helper()
	for !a.add(t, tr, env.Do(t, "POST", "/v1/transfers", apiKey, tr.key, tr.body())) {
		if time.Now().After(deadline) {
			t.Errorf("%s: no final answer by the deadline", tr.key)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sendAll sends every transfer concurrently until each has its final answer.
func (a *answers) sendAll(t *testing.T, env *testenv.Env, apiKey string, ts []planned) {
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for _, tr := range ts {
		wg.Go(func() { a.send(t, env, apiKey, tr, deadline) })
	}
	wg.Wait()
}

// summary is the count of answers by phase, status and problem type (or transfer status).
func (a *answers) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var s []string
	for k, n := range a.counts {
		s = append(s, fmt.Sprintf("%s %d %s: %d", k.phase, k.status, k.kind, n))
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

func workflowID(ownerID, key string) string { return "transfer/" + ownerID + "/" + key }

// settle checks the ledger against the answers and the design: every transfer answered finally,
// as its design guarantees (so a system that refuses everything fails); exactly one transfer
// under each workflow ID, the one the answer names, with its two entries if completed and none
// if rejected; one closed Temporal run per workflow ID; every account holding its funding plus
// the transfers that completed; and the ledger reconciled.
func (a *answers) settle(t *testing.T, env *testenv.Env, ownerID string, ts []planned, funding map[string]int64) {
	t.Helper()
	ids := make([]string, len(ts))
	for i, tr := range ts {
		ids[i] = workflowID(ownerID, tr.key)
	}
	sent := make([]testenv.Sent, 0, len(ts))
	finals := make([]testenv.Response, 0, len(ts))
	for i, tr := range ts {
		final, answered := a.final[tr.key]
		if !answered {
			t.Errorf("%s: no final answer", tr.key)
			continue
		}
		sent = append(sent, testenv.Sent{WorkflowID: ids[i], From: tr.from, To: tr.to, Amount: tr.amount, Rejected: tr.rejected})
		finals = append(finals, final)
	}
	moved, completed := env.HeldToAnswers(t, sent, finals)
	want := maps.Clone(funding)
	for id, m := range moved {
		want[id] += m
	}
	if completed < len(ts)*8/10 {
		t.Errorf("%d of %d transfers completed: the design guarantees at least 80%%", completed, len(ts))
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if got := env.Balance(t, id); got != want[id] {
			t.Errorf("account %s: balance %d, its funding and the completed transfers make %d", id, got, want[id])
		}
	}
	oneRunEach(t, env, workflowID(ownerID, ""), ids)
	oneEventEach(t, env, ids)
	env.Reconcile(t)
}

// oneEventEach checks that each transfer under the workflow IDs has exactly one event of its
// final status, whatever was killed or cut while it was posted: a posting that rolled back wrote
// none, the one that committed wrote its own. (A run that gave up before a re-run posted it adds
// a transfer.failed, which the contract allows and this counts apart.)
func oneEventEach(t *testing.T, env *testenv.Env, ids []string) {
	t.Helper()
	rows, err := env.DB.Query(context.Background(), `
		SELECT t.id, t.status, count(e.seq) FILTER (WHERE e.type <> 'transfer.failed' OR t.status = 'failed'),
			count(e.seq) FILTER (WHERE e.type = 'transfer.' || t.status)
		FROM transfers t LEFT JOIN events e ON e.object_id = t.id
		WHERE t.workflow_id = ANY($1) GROUP BY t.id, t.status`, ids)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id, status string
		var events, ofStatus int
		if err := rows.Scan(&id, &status, &events, &ofStatus); err != nil {
			t.Fatal(err)
		}
		if n++; events != 1 || ofStatus != 1 {
			t.Errorf("transfer %s (%s) has %d events, %d of its status; want exactly one, transfer.%s", id, status, events, ofStatus, status)
		}
	}
	if err := rows.Err(); err != nil || n != len(ids) {
		t.Errorf("%d transfers of %d workflow IDs (%v)", n, len(ids), err)
	}
}

// oneRunEach checks that each workflow ID has exactly one Temporal run, closed as completed. One
// visibility query lists the runs of every ID under prefix (hundreds of env.Executions, one
// query each, take seconds).
func oneRunEach(t *testing.T, env *testenv.Env, prefix string, ids []string) {
	t.Helper()
	var runs map[string][]enums.WorkflowExecutionStatus
	testenv.WaitFor(t, "the runs to be visible and closed", func() bool {
		runs = map[string][]enums.WorkflowExecutionStatus{}
		req := &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId STARTS_WITH '%s'", prefix), PageSize: 1000}
		for {
			resp, err := env.Temporal.ListWorkflow(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range resp.GetExecutions() {
				if e.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
					return false
				}
				runs[e.GetExecution().GetWorkflowId()] = append(runs[e.GetExecution().GetWorkflowId()], e.GetStatus())
			}
			if req.NextPageToken = resp.GetNextPageToken(); len(req.NextPageToken) == 0 {
				return len(runs) >= len(ids)
			}
		}
	})
	for _, id := range ids {
		if r := runs[id]; len(r) != 1 || r[0] != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Errorf("%s: runs %v, want one, completed", id, r)
		}
	}
}

// sendHeld sends each transfer once while every source is held, recording the answers, and
// returns once all of them are posting (waiting for their locks), with a function that
// releases them and waits for those answers.
func (a *answers) sendHeld(t *testing.T, env *testenv.Env, apiKey string, ts []planned) (release func()) {
	var releases []func()
	for _, tr := range ts {
		releases = append(releases, env.Hold(t, tr.from))
	}
	var wg sync.WaitGroup
	for _, tr := range ts {
		wg.Go(func() { a.add(t, tr, env.Do(t, "POST", "/v1/transfers", apiKey, tr.key, tr.body())) })
	}
	release = func() {
		for _, r := range releases {
			r()
		}
		wg.Wait()
	}
	t.Cleanup(release) // before the Env stops, if the test stops early
	testenv.WaitFor(t, "every transfer to be posting", func() bool { return env.Waiting(t) >= len(ts) })
	return release
}

// running returns the current run of each workflow ID, failing t unless each is running.
func running(t *testing.T, env *testenv.Env, ids []string, when string) (runIDs []string) {
	t.Helper()
	for _, id := range ids {
		var d *workflowservice.DescribeWorkflowExecutionResponse
		testenv.WaitFor(t, "Temporal to describe "+id+" "+when, func() bool { // a client reconnecting may fail once
			var err error
			d, err = env.Temporal.DescribeWorkflowExecution(context.Background(), id, "")
			return err == nil
		})
		if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("%s %s: %v, want running", when, id, st)
		}
		runIDs = append(runIDs, d.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	}
	return runIDs
}

func keysOf(ownerID string, ts []planned) (ids []string, from []string) {
	for _, tr := range ts {
		ids, from = append(ids, workflowID(ownerID, tr.key)), append(from, tr.from)
	}
	return ids, from
}

// The worker dies after the ledger transaction committed and before Temporal heard of it: a
// new worker runs the posting again, which finds it done and posts nothing. 20 transfers die
// at that point together.
func TestWorkerKilledBetweenCommitAndRecord(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_worker", testenv.Options{NoWorker: true})
	toTemporal := testenv.NewProxy(t, env.TemporalAddr())
	// Enough connections for all 20 postings to wait on their locks at once.
	first := env.Process(t, testenv.BuildPayments(t), toTemporal.Addr(), []string{"worker"},
		"DATABASE_URL="+env.URL+"&pool_max_conns=32")
	ownerID, apiKey, ts, funding := pairs(t, env, "crash", 20, 60, 100)
	ids, from := keysOf(ownerID, ts)
	a := newAnswers("held")

	release := a.sendHeld(t, env, apiKey, ts)
	toTemporal.Freeze() // from here the worker's reports to Temporal go nowhere
	answered := make(chan struct{})
	go func() { release(); close(answered) }()
	testenv.WaitFor(t, "every posting to commit", func() bool {
		return env.Count(t, `SELECT count(*) FROM transfers WHERE from_account_id = ANY($1) AND status = 'completed'`, from) == len(ts)
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	toTemporal.Cut()
	running(t, env, ids, "after the first worker was killed") // Temporal never heard of the postings

	// The second worker has a name of its own, which the histories must show posting.
	opts := testenv.ClientOptions(env.TemporalAddr()) // sealing as the first worker did
	opts.Identity, opts.Logger = "second-worker", tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	c, err := client.NewClientFromExisting(env.Temporal, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	second := env.NewWorker(c)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	a.setPhase("second worker")
	a.sendAll(t, env, apiKey, ts)
	<-answered
	a.settle(t, env, ownerID, ts, funding)
	for _, id := range ids {
		postedBy(t, env, id, fmt.Sprintf("%d@", first.Process.Pid), "second-worker")
	}
	t.Logf("answers: %s", a.summary())
}

// postedBy checks in workflow id's history that the worker named firstPrefix started a workflow
// task that never completed, and that every PostTransfer marker was recorded by a workflow task
// that second completed: the second worker ran the posting again.
func postedBy(t *testing.T, env *testenv.Env, id, firstPrefix, second string) {
	t.Helper()
	it := env.Temporal.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	completedBy := map[int64]string{}
	firstStarted, markers := false, 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if s := ev.GetWorkflowTaskStartedEventAttributes(); s != nil && strings.HasPrefix(s.GetIdentity(), firstPrefix) {
			firstStarted = true
		}
		if c := ev.GetWorkflowTaskCompletedEventAttributes(); c != nil {
			completedBy[ev.GetEventId()] = c.GetIdentity()
			if strings.HasPrefix(c.GetIdentity(), firstPrefix) {
				t.Errorf("%s: the killed worker completed workflow task %d", id, ev.GetEventId())
			}
		}
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "LocalActivity" &&
			slices.ContainsFunc(m.GetDetails()["data"].GetPayloads(), func(p *commonpb.Payload) bool {
				opened, err := codec.Codec{Ring: testenv.Keys}.Decode([]*commonpb.Payload{p}) // sealed by the workers
				return err == nil && strings.Contains(string(opened[0].GetData()), `"PostTransfer"`)
			}) {
			markers++
			if by := completedBy[m.GetWorkflowTaskCompletedEventId()]; by != second {
				t.Errorf("%s: the PostTransfer marker was recorded by %q, want %q", id, by, second)
			}
		}
	}
	if !firstStarted || markers != 1 {
		t.Errorf("%s: the first worker started a task: %v; %d PostTransfer markers, want 1", id, firstStarted, markers)
	}
}

// PostgreSQL is cut off, through a proxy, in the middle of a load: requests fail with 503 and
// postings retry; once it is back, every transfer completes once.
func TestPostgresUnreachableDuringLoad(t *testing.T) {
	toPostgres := testenv.NewProxy(t, testenv.PostgresAddr())
	env := testenv.New(t, "payments_test_faults_pg", testenv.Options{DatabaseHost: toPostgres.Addr()})
	const accounts, count, clients = 10, 400, 16
	ownerID, apiKey := env.Owner(t)
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = env.Account(t, apiKey, "USD")
	}
	// Each account is funded with everything it sends, so no order of postings leaves one short:
	// every transfer completes, except every 20th, which asks for more than all the accounts
	// hold together and is rejected.
	rng := rand.New(rand.NewPCG(3, 4))
	funding := map[string]int64{}
	for _, id := range ids {
		funding[id] = 0
	}
	ts := make([]planned, count)
	for i := range ts {
		f, g := testenv.Pair(rng, accounts)
		ts[i] = planned{key: fmt.Sprintf("pg-%d", i), from: ids[f], to: ids[g], amount: 1 + rng.Int64N(50), rejected: i%20 == 19}
		if !ts[i].rejected {
			funding[ids[f]] += ts[i].amount
		}
	}
	var total int64
	for _, id := range ids {
		if funding[id] > 0 {
			env.Fund(t, id, funding[id])
		}
		total += funding[id]
	}
	for i := range ts {
		if ts[i].rejected {
			ts[i].amount = total + 1
		}
	}

	a := newAnswers("before")
	deadline := time.Now().Add(2 * time.Minute)
	next := make(chan planned)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for tr := range next {
				a.send(t, env, apiKey, tr, deadline)
			}
		})
	}
	go func() {
		for _, tr := range ts {
			next <- tr
		}
		close(next)
	}()
	t.Cleanup(func() { toPostgres.Restore(); wg.Wait() }) // before the Env stops, if the test stops early
	finals := func() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.final) }
	testenv.WaitFor(t, "a quarter of the load to be answered", func() bool { return finals() >= count/4 })
	a.setPhase("cut")
	cutAt := time.Now()
	toPostgres.Cut()
	testenv.WaitFor(t, "clients to feel the outage", func() bool { return a.count("cut", http.StatusServiceUnavailable) >= 50 })
	a.setPhase("restored")
	restoredAt := time.Now()
	toPostgres.Restore()
	wg.Wait()

	// The outage was felt: 503s while PostgreSQL was cut off, and postings under way when it was
	// cut (the transfer claimed before) that completed only after it was back.
	if a.count("cut", http.StatusServiceUnavailable) == 0 {
		t.Error("no 503 while PostgreSQL was cut off")
	}
	wfIDs, _ := keysOf(ownerID, ts)
	waited := env.Count(t, `SELECT count(*) FROM transfers WHERE workflow_id = ANY($1) AND status = 'completed'
		AND created_at < $2 AND completed_at > $3`, wfIDs, cutAt, restoredAt)
	if waited == 0 {
		t.Error("no posting under way at the cut completed after PostgreSQL was back")
	}
	retried := 0
	for _, tr := range ts {
		if slices.ContainsFunc(a.all[tr.key], func(r testenv.Response) bool { return r.Status == http.StatusServiceUnavailable }) {
			retried++
		}
	}
	a.settle(t, env, ownerID, ts, funding)
	t.Logf("%d transfers: %d answered 503 and were sent again, %d postings waited for PostgreSQL; answers: %s",
		count, retried, waited, a.summary())
}

// The Temporal server stops and starts again (its state in a SQLite file, or every service of a
// cluster, its state in PostgreSQL) while transfers are in flight: they complete once, and their retries get the result.
func TestTemporalRestartsMidFlight(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_temporal", testenv.Options{
		TemporalState: filepath.Join(t.TempDir(), "temporal.db")})
	ownerID, apiKey, ts, funding := pairs(t, env, "restart", 10, 30, 100)
	ids, from := keysOf(ownerID, ts)
	a := newAnswers("held")

	release := a.sendHeld(t, env, apiKey, ts)
	// Mid-flight: each transfer's run is open and its posting waits, the ledger row pending.
	before := running(t, env, ids, "before the restart")
	if n := env.Count(t, `SELECT count(*) FROM transfers WHERE from_account_id = ANY($1) AND status = 'pending'`, from); n != len(ts) {
		t.Fatalf("%d transfers pending before the restart, want %d", n, len(ts))
	}
	oldPids := env.TemporalPids()
	env.RestartTemporal(t)
	if pids := env.TemporalPids(); slices.ContainsFunc(pids, func(p int) bool { return slices.Contains(oldPids, p) }) {
		t.Fatalf("the Temporal server was not restarted: processes %v before, %v after", oldPids, pids)
	}
	// The postings waited through the restart, and the server kept the same runs.
	if n := env.Waiting(t); n < len(ts) {
		t.Fatalf("%d postings still waiting after the restart, want %d", n, len(ts))
	}
	if after := running(t, env, ids, "after the restart"); !slices.Equal(before, after) {
		t.Fatalf("runs before the restart %v, after %v", before, after)
	}
	a.setPhase("released")
	release()
	a.setPhase("retry")
	a.sendAll(t, env, apiKey, ts)
	a.settle(t, env, ownerID, ts, funding)
	t.Logf("answers: %s", a.summary())
}
