package outages

// Runs that end, or stay open, other than by themselves: an operator's Terminate, a worker that
// stops talking to Temporal after its posting committed. Whatever a client is told about a
// transfer stays true, and a key's new use never joins an earlier use's run.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"

	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/rig/testenv"
	"github.com/payments/payments/workflows"
)

// startWorker runs a worker in this process on env's client until t ends.
func startWorker(t *testing.T, env *testenv.Env) {
	t.Helper()
	w := env.NewWorker(nil)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

// An operator terminates runs before they post. The client waiting on one is told 500
// transfer-failed, "moved no money", and that stays true: the transfer is failed in the ledger,
// fenced against that run. A run terminated with nobody waiting (the client got 202) is resolved
// by the recovery Schedule once past its bound. The same requests afterwards post each once.
func TestTerminatedRunsMoveNoMoneyAndRunAgain(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_runs", testenv.Options{NoWorker: true, SyncWait: 3 * time.Second})
	ownerID, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	// No worker yet: the runs start and wait for one.
	waited := make(chan testenv.Response, 1)
	go func() {
		waited <- env.Do(t, "POST", "/v1/transfers", key, "waited", testenv.TransferBody(from, to, 30))
	}()
	wfWaited := "transfer/" + ownerID + "/waited"
	testenv.WaitFor(t, "the run to exist", func() bool {
		_, err := env.Temporal.DescribeWorkflowExecution(context.Background(), wfWaited, "")
		return err == nil
	})
	if err := env.Temporal.TerminateWorkflow(context.Background(), wfWaited, "", "operator"); err != nil {
		t.Fatal(err)
	}
	r := <-waited
	if r.Status != http.StatusInternalServerError || testenv.ProblemType(t, r) != "transfer-failed" {
		t.Fatalf("waiting client: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["transfer_id"].(string)

	abandoned := env.Do(t, "POST", "/v1/transfers", key, "abandoned", testenv.TransferBody(from, to, 20))
	wfAbandoned := "transfer/" + ownerID + "/abandoned"
	if abandoned.Status != http.StatusAccepted {
		t.Fatalf("abandoned: %d %s", abandoned.Status, abandoned.Body)
	}
	if err := env.Temporal.TerminateWorkflow(context.Background(), wfAbandoned, "", "operator"); err != nil {
		t.Fatal(err)
	}

	startWorker(t, env)
	env.Fund(t, from, 100)
	tr, err := env.Ledger.Transfer(context.Background(), "", id)
	if err != nil || tr.Status != ledger.TransferFailed || tr.FailureReason == nil || strings.Contains(*tr.FailureReason, "Terminate") {
		t.Fatalf("transfer told failed: %+v %v", tr, err)
	}
	abandonedID := abandoned.JSON(t)["id"].(string)
	if tr, _ := env.Ledger.Transfer(context.Background(), "", abandonedID); tr.Status != ledger.TransferPending {
		t.Fatalf("abandoned transfer %s before recovery, want pending", tr.Status)
	}
	// Past the bound, the recovery pass marks it failed: its run ended without posting.
	if _, err := env.DB.Exec(context.Background(), `UPDATE transfers SET created_at = now() - $2::interval WHERE id = $1`,
		abandonedID, workflows.StaleAfter+time.Minute); err != nil {
		t.Fatal(err)
	}
	var res operation.Tally
	env.RunSchedule(t, workflows.RecoveryScheduleID, &res)
	if res.Failed != 1 || res.Started != 0 {
		t.Fatalf("recovery pass: %+v, want one marked failed", res)
	}
	tr, _ = env.Ledger.Transfer(context.Background(), "", abandonedID)
	if tr.Status != ledger.TransferFailed || tr.FailureReason == nil || !strings.Contains(*tr.FailureReason, "terminated") {
		t.Fatalf("abandoned transfer after recovery: %+v", tr)
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = ANY($1)`, []string{id, abandonedID}); n != 0 {
		t.Fatalf("%d entries for transfers told failed", n)
	}

	// The same requests run again, each once.
	for _, c := range []struct {
		key    string
		amount int64
		id     string
	}{{"waited", 30, id}, {"abandoned", 20, abandonedID}} {
		again := env.Do(t, "POST", "/v1/transfers", key, c.key, testenv.TransferBody(from, to, c.amount))
		if again.Status != http.StatusCreated || again.JSON(t)["id"] != c.id {
			t.Fatalf("%s again: %d %s", c.key, again.Status, again.Body)
		}
	}
	if env.Balance(t, from) != 50 || env.Balance(t, to) != 50 {
		t.Fatalf("balances %d/%d, want 50/50", env.Balance(t, from), env.Balance(t, to))
	}
	env.Reconcile(t)
}

// A key's first use leaves its run open after its posting committed (its worker lost Temporal),
// and its record expires. The key's next use, with another body, must not join that run and be
// answered with the old transfer: it waits its turn (409), then runs as a transfer of its own.
func TestNewUseOfAKeyNeverJoinsAnEarlierRun(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_join", testenv.Options{NoWorker: true, TTL: time.Millisecond, SyncWait: time.Second})
	toTemporal := testenv.NewProxy(t, env.TemporalAddr())
	first := env.Process(t, testenv.BuildPayments(t), toTemporal.Addr(), []string{"worker"})
	ownerID, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, from, 1_000)
	wf := "transfer/" + ownerID + "/reused"
	scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: "reused"}

	// The first use posts, then its worker stops reaching Temporal: the run stays open.
	release := env.Hold(t, from)
	answered := make(chan testenv.Response, 1)
	go func() {
		answered <- env.Do(t, "POST", "/v1/transfers", key, "reused", testenv.TransferBody(from, to, 100))
	}()
	testenv.WaitFor(t, "the posting to wait for the held account", func() bool { return env.Waiting(t) > 0 })
	toTemporal.Freeze()
	release()
	testenv.WaitFor(t, "the first use's posting to commit", func() bool {
		tr, err := env.Ledger.Transfer(context.Background(), "", scope.TransferID(0))
		return err == nil && tr.Status == ledger.TransferCompleted
	})
	if r := <-answered; r.Status != http.StatusCreated {
		t.Fatalf("first use: %d %s", r.Status, r.Body)
	}
	desc, err := env.Temporal.DescribeWorkflowExecution(context.Background(), wf, "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the first use's run should still be open: %v %v", desc.GetWorkflowExecutionInfo().GetStatus(), err)
	}
	// Its record expires and the cleanup (the same function its Schedule runs) deletes it.
	if n, err := idempotency.DeleteExpired(context.Background(), env.DB, 1000); err != nil || n < 1 {
		t.Fatalf("cleanup deleted %d: %v", n, err)
	}

	second := env.Do(t, "POST", "/v1/transfers", key, "reused", testenv.TransferBody(from, to, 200))
	if second.Status != http.StatusConflict || testenv.ProblemType(t, second) != "idempotency-key-in-use" || second.Header.Get("Retry-After") == "" {
		t.Fatalf("a new use while the earlier run is open: %d %s", second.Status, second.Body)
	}
	if env.Balance(t, from) != 900 {
		t.Fatalf("balance %d, want 900: the new use moved money, or the old one twice", env.Balance(t, from))
	}
	// "Nothing was done" holds: the refused use left no claim that a recovery pass could later
	// run behind the client's back.
	if _, found, err := idempotency.Lookup(context.Background(), env.DB, scope); err != nil || found {
		t.Fatalf("the refused use's record is still there (%v, %v)", found, err)
	}
	if _, err := env.Ledger.Transfer(context.Background(), "", scope.TransferID(1)); err == nil {
		t.Fatal("the refused use's transfer is still there")
	}

	// The stuck worker goes; a new one finishes the open run (its posting finds the transfer
	// final), and then the new use runs.
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	toTemporal.Cut()
	startWorker(t, env)
	if st := env.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the first use's run: %v", st)
	}
	var again testenv.Response
	testenv.WaitFor(t, "the new use to complete", func() bool {
		again = env.Do(t, "POST", "/v1/transfers", key, "reused", testenv.TransferBody(from, to, 200))
		return again.Status == http.StatusCreated
	})
	if again.JSON(t)["id"] != scope.TransferID(1) || again.JSON(t)["amount_minor"] != float64(200) {
		t.Fatalf("new use: %s", again.Body)
	}
	if env.Balance(t, from) != 700 || env.Balance(t, to) != 300 {
		t.Fatalf("balances %d/%d, want 700/300", env.Balance(t, from), env.Balance(t, to))
	}
	if runs := env.Executions(t, wf); len(runs) != 2 {
		t.Fatalf("%d runs under %s, want one per use", len(runs), wf)
	}
	env.Reconcile(t)
}
