package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/payments/payments/internal/testenv"
)

// startAPI runs `payments api` against the test database and Temporal and returns its base URL
// once it is ready.
func startAPI(t *testing.T, e *testenv.Env, bin string) (*exec.Cmd, string) {
	t.Helper()
	addr := testenv.FreeAddr()
	cmd := e.Process(t, bin, "", []string{"api"}, "PAYMENTS_HTTP_ADDR="+addr)
	base := "http://" + addr
	testenv.WaitFor(t, "payments api to be ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return cmd, base
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
