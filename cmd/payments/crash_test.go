package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/rig/testenv"
	"github.com/payments/payments/workflows"
)

// startAPI runs `payments api` against the test database and Temporal and returns its base URL
// once it is ready.
func startAPI(t *testing.T, e *testenv.Env, bin string) (*exec.Cmd, string) {
	return e.StartAPI(t, bin, "")
}

// The API process dies (SIGKILL) after starting the transfer's workflow and before answering;
// the retry, sent to another API process, gets the one result and the money moves once.
func TestAPIKilledBetweenStartAndAnswer(t *testing.T) {
	api, base := startAPI(t, env, testenv.BuildPayments(t))
	ownerID, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, from, 1_000)
	body := `{"from_account_id":"` + from + `","to_account_id":"` + to + `","amount_minor":600,"currency":"USD"}`

	release := env.Hold(t, from) // the workflow starts, then its posting waits
	lost := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", base+"/v1/transfers", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", "crash")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		lost <- err
	}()
	workflowID := "transfer/" + ownerID + "/crash"
	testenv.WaitFor(t, "the workflow to start and its posting to wait", func() bool {
		_, err := env.Temporal.DescribeWorkflowExecution(context.Background(), workflowID, "")
		return err == nil && env.Waiting(t) > 0
	})
	if err := api.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-lost; err == nil {
		t.Fatal("the client got an answer from a killed API")
	}
	release()

	retry := env.Do(t, "POST", "/v1/transfers", key, "crash", body)
	if retry.Status != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s", retry.Status, retry.Body)
	}
	if env.Balance(t, from) != 400 || env.Balance(t, to) != 600 {
		t.Fatalf("balances %d/%d, want 400/600", env.Balance(t, from), env.Balance(t, to))
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1`, retry.JSON(t)["id"]); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	if runs := env.Executions(t, workflowID); len(runs) != 1 {
		t.Fatalf("%d executions, want 1", len(runs))
	}
}

// The API process dies (SIGKILL) after a transfer's claim committed and before its workflow
// started: Temporal is frozen behind a proxy, so the start never leaves. The claim is left
// pending, without a workflow. A client that retries gets the transfer started then, once; for
// a client that never retries, the transfer-recovery Schedule starts it once the claim is past
// its bound.
func TestAPIKilledBetweenClaimAndStart(t *testing.T) {
	toTemporal := testenv.NewProxy(t, env.TemporalAddr())
	api, base := env.StartAPI(t, testenv.BuildPayments(t), toTemporal.Addr())
	ownerID, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, from, 1_000)
	// The abandoned one has a key of the longest kind, too long to be whole in its workflow ID:
	// the recovery pass finds it in its record.
	abandoned := strings.Repeat("a", 250) + "-long"
	bodies := map[string]string{"retried": testenv.TransferBody(from, to, 600), abandoned: testenv.TransferBody(from, to, 300)}

	toTemporal.Freeze()
	for k, body := range bodies {
		go func() {
			req, _ := http.NewRequest("POST", base+"/v1/transfers", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Idempotency-Key", k)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wf := func(k string) string {
		return idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: k}.WorkflowID()
	}
	testenv.WaitFor(t, "both claims to commit", func() bool {
		return env.Count(t, `SELECT count(*) FROM transfers WHERE workflow_id = ANY($1) AND status = 'pending'`,
			[]string{wf("retried"), wf(abandoned)}) == 2
	})
	if err := api.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	toTemporal.Cut() // what the frozen proxy held is dropped: the starts never reach Temporal
	for k := range bodies {
		if _, err := env.Temporal.DescribeWorkflowExecution(context.Background(), wf(k), ""); err == nil {
			t.Fatalf("%s: a workflow exists; the crash was meant to come before the start", k)
		}
	}

	retry := env.Do(t, "POST", "/v1/transfers", key, "retried", bodies["retried"])
	if retry.Status != http.StatusCreated || retry.JSON(t)["amount_minor"] != float64(600) {
		t.Fatalf("retry: %d %s", retry.Status, retry.Body)
	}

	// Nobody retries the other one: past its bound, the recovery pass starts it.
	if _, err := env.DB.Exec(context.Background(), `UPDATE transfers SET created_at = now() - $2::interval WHERE workflow_id = $1`,
		wf(abandoned), workflows.StaleAfter+time.Minute); err != nil {
		t.Fatal(err)
	}
	var res operation.Tally
	env.RunSchedule(t, workflows.RecoveryScheduleID, &res)
	if res.Started < 1 {
		t.Fatalf("recovery pass %+v: the abandoned claim was not started", res)
	}
	if st := env.Settled(t, wf(abandoned)); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("abandoned transfer's workflow: %v", st)
	}
	later := env.Do(t, "POST", "/v1/transfers", key, abandoned, bodies[abandoned])
	if later.Status != http.StatusCreated || later.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the abandoned client, retrying much later: %d %s", later.Status, later.Body)
	}
	if env.Balance(t, from) != 100 || env.Balance(t, to) != 900 {
		t.Fatalf("balances %d/%d, want 100/900", env.Balance(t, from), env.Balance(t, to))
	}
	for k := range bodies {
		if runs := env.Executions(t, wf(k)); len(runs) != 1 {
			t.Fatalf("%s: %d runs, want 1", k, len(runs))
		}
	}
	env.Reconcile(t)
}

// `payments worker` serves Prometheus metrics, its own and the Temporal SDK's.
func TestWorkerServesSDKMetrics(t *testing.T) {
	addr := testenv.FreeAddr()
	env.Process(t, testenv.BuildPayments(t), "", []string{"worker"}, "PAYMENTS_METRICS_ADDR="+addr)
	var body string
	testenv.WaitFor(t, "the worker's /metrics to show the SDK's polls", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "temporal_worker_start") && strings.Contains(body, "temporal_long_request")
	})
	if !strings.Contains(body, "payments_ledger_transaction_retries_total") {
		t.Fatalf("the worker's own metrics are missing:\n%s", body)
	}
}
