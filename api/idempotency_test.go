package api_test

// One test per row of the Idempotency-Key contract (docs/contract.md §3), end to end through HTTP, each
// checking the ledger as well as the answer.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/rig/testenv"
	"github.com/payments/payments/transfers"
)

// fundedPair opens two USD accounts for a new owner and funds the first.
// bothShapes runs f against the API as `payments serve` runs it (split false: the worker in its
// process, eager start, answered from the posting) and as `payments api` runs it (split true:
// no worker there, answered through the server by Update-With-Start).
func bothShapes(t *testing.T, f func(t *testing.T, split bool)) {
	t.Run("serve", func(t *testing.T) { f(t, false) })
	t.Run("api", func(t *testing.T) { f(t, true) })
}

func fundedPair(t *testing.T, amount int64) (ownerID, key, from, to string) {
	ownerID, key = env.Owner(t)
	from, to = env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, from, amount)
	return ownerID, key, from, to
}

// moved checks the two balances and that exactly n transfers, each with its two entries,
// moved money between the accounts.
func moved(t *testing.T, from, to string, fromBalance, toBalance int64, n int) {
	t.Helper()
	if got := env.Balance(t, from); got != fromBalance {
		t.Errorf("source balance %d, want %d", got, fromBalance)
	}
	if got := env.Balance(t, to); got != toBalance {
		t.Errorf("destination balance %d, want %d", got, toBalance)
	}
	if got := env.Count(t, `SELECT count(*) FROM transfers WHERE from_account_id = $1 AND status = 'completed'`, from); got != n {
		t.Errorf("%d completed transfers, want %d", got, n)
	}
	if got := env.Count(t, `SELECT count(*) FROM entries WHERE account_id = $1`, to); got != n {
		t.Errorf("%d entries on the destination, want %d", got, n)
	}
}

// oneExecution checks that concurrent duplicates all got the same 201, and that exactly one of
// them did not say it was a replay: one execution answered them all.
func oneExecution(t *testing.T, answers []testenv.Response) {
	t.Helper()
	fresh := 0
	for i, a := range answers {
		if a.Status != http.StatusCreated {
			t.Fatalf("duplicate %d: %d %s", i, a.Status, a.Body)
		}
		if testenv.Differ(answers[0], a) { // answers[0] may be the fresh one: no replay to ask of it
			t.Fatalf("answers differ:\n%d %s\n%d %s", answers[0].Status, answers[0].Body, a.Status, a.Body)
		}
		if a.Header.Get("Idempotent-Replayed") != "true" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d answers say they are not replays, want exactly 1", fresh)
	}
}

// Row 1: the header itself.
func TestIdempotencyKeyHeader(t *testing.T) {
	ownerID, key, from, to := fundedPair(t, 1_000)
	body := testenv.TransferBody(from, to, 10)
	for _, c := range []struct {
		name   string
		values []string
		slug   string
	}{
		{"missing", nil, "missing-idempotency-key"},
		{"empty", []string{""}, "invalid-idempotency-key"},
		{"256 characters", []string{strings.Repeat("k", 256)}, "invalid-idempotency-key"},
		{"space", []string{"a b"}, "invalid-idempotency-key"},
		{"tab", []string{"a\tb"}, "invalid-idempotency-key"},
		{"non-ASCII", []string{"clé"}, "invalid-idempotency-key"},
		{"two header lines", []string{"a", "b"}, "invalid-idempotency-key"},
		{"the same key twice", []string{"a", "a"}, "invalid-idempotency-key"},
		{"empty quoted string", []string{`""`}, "invalid-idempotency-key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := env.Request(t, "POST", "/v1/transfers", key, body)
			for _, v := range c.values {
				req.Header.Add("Idempotency-Key", v)
			}
			r := testenv.Send(t, req)
			if r.Status != http.StatusBadRequest || testenv.ProblemType(t, r) != c.slug {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
		})
	}
	moved(t, from, to, 1_000, 0, 0)
	if n := env.Count(t, `SELECT count(*) FROM idempotency_records WHERE owner_id = $1 AND route = $2`, ownerID, idempotency.RouteTransfers); n != 0 {
		t.Fatalf("%d records stored for refused keys", n)
	}

	// 255 visible characters make a key; a quoted RFC 8941 string is its content.
	if r := env.Do(t, "POST", "/v1/transfers", key, strings.Repeat("k", 255), body); r.Status != http.StatusCreated {
		t.Fatalf("255-character key: %d %s", r.Status, r.Body)
	}
	quoted := env.Do(t, "POST", "/v1/transfers", key, `"order-1"`, body)
	if quoted.Status != http.StatusCreated || quoted.JSON(t)["workflow_id"] != "transfer/"+ownerID+"/order-1" {
		t.Fatalf("quoted key: %d %s", quoted.Status, quoted.Body)
	}
	plain := env.Do(t, "POST", "/v1/transfers", key, "order-1", body)
	testenv.SameAnswer(t, quoted, plain)
	if plain.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the unquoted key is the same key: want a replay")
	}
	moved(t, from, to, 980, 20, 2)
}

// Row 2: the scope is (owner, method + route, key).
func TestKeyScopeIsOwnerAndRoute(t *testing.T) {
	aliceID, alice, a1, a2 := fundedPair(t, 1_000)
	bobID, bob, b1, b2 := fundedPair(t, 1_000)
	ra := env.Do(t, "POST", "/v1/transfers", alice, "shared", testenv.TransferBody(a1, a2, 100))
	rb := env.Do(t, "POST", "/v1/transfers", bob, "shared", testenv.TransferBody(b1, b2, 100))
	if ra.Status != http.StatusCreated || rb.Status != http.StatusCreated || rb.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("alice %d %s / bob %d %s", ra.Status, ra.Body, rb.Status, rb.Body)
	}
	if ra.JSON(t)["workflow_id"] != "transfer/"+aliceID+"/shared" || rb.JSON(t)["workflow_id"] != "transfer/"+bobID+"/shared" {
		t.Fatalf("workflow ids %v / %v", ra.JSON(t)["workflow_id"], rb.JSON(t)["workflow_id"])
	}
	acc := env.Do(t, "POST", "/v1/accounts", alice, "shared", `{"currency":"USD"}`)
	if acc.Status != http.StatusCreated || acc.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("same key on another route: %d %s", acc.Status, acc.Body)
	}
	moved(t, a1, a2, 900, 100, 1)
	moved(t, b1, b2, 900, 100, 1)
}

// Row 3: a key reused with another body while the first request is still running.
func TestKeyReusedWhileTheFirstIsRunning(t *testing.T) {
	_, key, from, to := fundedPair(t, 1_000)
	release := env.Hold(t, from)
	first := make(chan testenv.Response, 1)
	go func() { first <- env.Do(t, "POST", "/v1/transfers", key, "k", testenv.TransferBody(from, to, 100)) }()
	testenv.WaitFor(t, "the first posting to wait for the held account", func() bool { return env.Waiting(t) > 0 })

	other := env.Do(t, "POST", "/v1/transfers", key, "k", testenv.TransferBody(from, to, 999))
	if other.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, other) != "idempotency-key-reused" {
		t.Fatalf("reused while running: %d %s", other.Status, other.Body)
	}
	release()
	r := <-first
	if r.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	testenv.SameAnswer(t, r, env.Do(t, "POST", "/v1/transfers", key, "k", testenv.TransferBody(from, to, 100)))
	moved(t, from, to, 900, 100, 1)
}

// Row 5: answers that are not stored; the key can be used again afterwards.
func TestAnswersThatAreNotStored(t *testing.T) {
	_, key, from, to := fundedPair(t, 1_000)
	unauthorized := env.Request(t, "POST", "/v1/transfers", "pk_wrong", testenv.TransferBody(from, to, 10))
	unauthorized.Header.Set("Idempotency-Key", "ns-401")
	if r := testenv.Send(t, unauthorized); r.Status != http.StatusUnauthorized {
		t.Fatalf("401: %d %s", r.Status, r.Body)
	}
	huge := `{"description":"` + strings.Repeat("x", 70_000) + `"}`
	if r := env.Do(t, "POST", "/v1/transfers", key, "ns-413", huge); r.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("413: %d %s", r.Status, r.Body)
	}

	// PostgreSQL unreachable: refused before anything is claimed.
	deadDB, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deadDB.Close)
	r := env.With(t, testenv.Options{DB: deadDB}).Do(t, "POST", "/v1/transfers", key, "ns-503-db", testenv.TransferBody(from, to, 999))
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("PostgreSQL down: %d %s", r.Status, r.Body)
	}

	// Temporal unreachable: the claim is kept (the start may have reached the server), so the
	// same request may continue under the key.
	deadTemporal, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deadTemporal.Close)
	r = env.With(t, testenv.Options{Temporal: deadTemporal, SyncWait: time.Second}).
		Do(t, "POST", "/v1/transfers", key, "ns-503-temporal", testenv.TransferBody(from, to, 10))
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("Temporal down: %d %s", r.Status, r.Body)
	}
	moved(t, from, to, 1_000, 0, 0)

	for _, k := range []string{"ns-401", "ns-413", "ns-503-db", "ns-503-temporal"} {
		if r := env.Do(t, "POST", "/v1/transfers", key, k, testenv.TransferBody(from, to, 10)); r.Status != http.StatusCreated {
			t.Fatalf("%s again: %d %s", k, r.Status, r.Body)
		}
	}
	moved(t, from, to, 960, 40, 4)
}

// A PostgreSQL that answers reads but refuses writes, as an old primary does during a failover:
// both routes answer 503 with Retry-After, store nothing, and the same keys work afterwards.
func TestDatabaseThatCannotWriteIsUnavailable(t *testing.T) {
	_, key, from, to := fundedPair(t, 1_000)
	cfg, err := pgxpool.ParseConfig(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	readOnly, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(readOnly.Close)
	failing := env.With(t, testenv.Options{DB: readOnly})
	before := len(env.Do(t, "GET", "/v1/accounts", key, "", "").JSON(t)["data"].([]any))
	for _, r := range []testenv.Response{
		failing.Do(t, "POST", "/v1/accounts", key, "ro-account", `{"currency":"USD"}`),
		failing.Do(t, "POST", "/v1/transfers", key, "ro-transfer", testenv.TransferBody(from, to, 10)),
	} {
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || testenv.ProblemType(t, r) != "service-unavailable" {
			t.Fatalf("read-only PostgreSQL: %d %s", r.Status, r.Body)
		}
	}
	moved(t, from, to, 1_000, 0, 0)
	if n := len(env.Do(t, "GET", "/v1/accounts", key, "", "").JSON(t)["data"].([]any)); n != before {
		t.Fatalf("%d accounts after the refused opening, want %d", n, before)
	}
	if r := env.Do(t, "POST", "/v1/accounts", key, "ro-account", `{"currency":"USD"}`); r.Status != http.StatusCreated {
		t.Fatalf("account again: %d %s", r.Status, r.Body)
	}
	if r := env.Do(t, "POST", "/v1/transfers", key, "ro-transfer", testenv.TransferBody(from, to, 10)); r.Status != http.StatusCreated {
		t.Fatalf("transfer again: %d %s", r.Status, r.Body)
	}
	moved(t, from, to, 990, 10, 1)
}

// Row 6: at least 50 concurrent duplicates make one execution and one posting.
func TestConcurrentDuplicatesMoveMoneyOnce(t *testing.T) {
	bothShapes(t, func(t *testing.T, split bool) {
		testConcurrentDuplicatesMoveMoneyOnce(t, env.With(t, testenv.Options{Split: split}))
	})
}

func testConcurrentDuplicatesMoveMoneyOnce(t *testing.T, api *testenv.Env) {
	const n = 50
	ownerID, key, from, to := fundedPair(t, 1_000)
	release := env.Hold(t, from)
	var written atomic.Int32
	answers := make([]testenv.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := api.Request(t, "POST", "/v1/transfers", key, testenv.TransferBody(from, to, 300))
			req.Header.Set("Idempotency-Key", "dup")
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { written.Add(1) }}
			answers[i] = testenv.Send(t, req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		})
	}
	// Every duplicate is sent while the first posting waits, so they all meet a running transfer.
	testenv.WaitFor(t, "all duplicates sent and the posting waiting", func() bool {
		return written.Load() == n && env.Waiting(t) > 0
	})
	release()
	wg.Wait()

	oneExecution(t, answers)
	moved(t, from, to, 700, 300, 1)
	if runs := env.Executions(t, "transfer/"+ownerID+"/dup"); len(runs) != 1 {
		t.Fatalf("%d workflow executions, want 1", len(runs))
	}
}

// Row 6, as `payments api` runs: Temporal refusing the request's Update for the whole wait (as it
// refuses Updates past a run's in-flight limit, which the SDK retries) still leaves the run
// started by the start that follows: the answer is a 202 or the transfer, never a 503, and the
// money moves once.
func TestAnUpdateRefusedForTheWholeWaitStillStartsTheRun(t *testing.T) {
	opts := testenv.ClientOptions(env.TemporalAddr())
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(refuseUpdates))
	temporal, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(temporal.Close)
	// A wait as long as the claim's and the start's budget: the Ask spends all of it.
	refused := env.With(t, testenv.Options{Temporal: temporal, Split: true, SyncWait: 5 * time.Second})
	_, key, from, to := fundedPair(t, 1_000)
	body := testenv.TransferBody(from, to, 300)

	first := refused.Do(t, "POST", "/v1/transfers", key, "refused", body)
	if first.Status != http.StatusAccepted && first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	again := env.Do(t, "POST", "/v1/transfers", key, "refused", body)
	if again.Status != http.StatusCreated || again.Header.Get("Location") != first.Header.Get("Location") {
		t.Fatalf("again: %d %s", again.Status, again.Body)
	}
	moved(t, from, to, 700, 300, 1)
}

// refuseUpdates answers every Update-With-Start as Temporal does past a run's in-flight limit.
func refuseUpdates(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/ExecuteMultiOperation") {
		return status.Error(codes.ResourceExhausted, "limit on number of concurrent in-flight updates has been reached")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Row 6: a duplicate that outwaits PAYMENTS_SYNC_WAIT gets 409 with Retry-After; the first
// request got 202 and the transfer completes once.
func TestDuplicateOfARunningTransferConflicts(t *testing.T) {
	bothShapes(t, func(t *testing.T, split bool) {
		testDuplicateOfARunningTransferConflicts(t, env.With(t, testenv.Options{SyncWait: 300 * time.Millisecond, Split: split}))
	})
}

func testDuplicateOfARunningTransferConflicts(t *testing.T, quick *testenv.Env) {
	_, key, from, to := fundedPair(t, 1_000)
	release := env.Hold(t, from)
	body := testenv.TransferBody(from, to, 250)

	first := quick.Do(t, "POST", "/v1/transfers", key, "slow", body)
	if first.Status != http.StatusAccepted || first.JSON(t)["status"] != "pending" || first.Header.Get("Location") == "" {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	dup := quick.Do(t, "POST", "/v1/transfers", key, "slow", body)
	if dup.Status != http.StatusConflict || testenv.ProblemType(t, dup) != "idempotency-key-in-use" {
		t.Fatalf("duplicate: %d %s", dup.Status, dup.Body)
	}
	if s, err := strconv.Atoi(dup.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("Retry-After %q", dup.Header.Get("Retry-After"))
	}
	if got := env.Do(t, "GET", first.Header.Get("Location"), key, "", "").JSON(t)["status"]; got != "pending" {
		t.Fatalf("transfer status %v while held, want pending", got)
	}
	moved(t, from, to, 1_000, 0, 0)

	release()
	done := quick.Do(t, "POST", "/v1/transfers", key, "slow", body)
	if done.Status != http.StatusCreated || done.Header.Get("Location") != first.Header.Get("Location") ||
		done.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after release: %d %s", done.Status, done.Body)
	}
	moved(t, from, to, 750, 250, 1)
}

// Row 7: the client hangs up right after sending; the transfer still runs, once, and the
// retry gets its result.
func TestClientThatHangsUpGetsTheResultOnRetry(t *testing.T) {
	bothShapes(t, func(t *testing.T, split bool) {
		testClientThatHangsUpGetsTheResultOnRetry(t, env.With(t, testenv.Options{Split: split}))
	})
}

func testClientThatHangsUpGetsTheResultOnRetry(t *testing.T, api *testenv.Env) {
	ownerID, key, from, to := fundedPair(t, 1_000)
	release := env.Hold(t, from)
	body := testenv.TransferBody(from, to, 400)
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	req := api.Request(t, "POST", "/v1/transfers", key, body)
	req.Header.Set("Idempotency-Key", "hang-up")
	sent := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	// The client hangs up once its request is claimed: the request has reached the API then
	// (a hang-up timed by the client's own writing can beat the request out of its buffers),
	// and the posting waits on the held account, so no answer can have come yet.
	testenv.WaitFor(t, "the request's claim", func() bool {
		return records(t, ownerID, idempotency.RouteTransfers, "hang-up") == 1
	})
	hangUp()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client should have hung up: %v", err)
	}
	testenv.WaitFor(t, "the transfer to be posting", func() bool { return env.Waiting(t) > 0 })
	release()

	retry := api.Do(t, "POST", "/v1/transfers", key, "hang-up", body)
	if retry.Status != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s", retry.Status, retry.Body)
	}
	moved(t, from, to, 600, 400, 1)
}

// Row 7, at the seam: a submission whose client has already gone is still claimed and started
// (only the wait follows the client), so no claim is left without its workflow.
func TestSubmissionOutlivesItsClient(t *testing.T) {
	ownerID, _, from, to := fundedPair(t, 1_000)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: "gone"}
	fp, err := idempotency.Fingerprint(scope.Route, map[string]any{"from_account_id": from, "to_account_id": to, "amount_minor": 70, "currency": "USD"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Transfers.Submit(gone, transfers.Request{Scope: scope, Fingerprint: fp,
		From: from, To: to, AmountMinor: 70, Currency: "USD"})
	if err == nil {
		t.Fatal("a submission whose client is gone cannot have waited for the result")
	}
	if err := env.Temporal.GetWorkflow(context.Background(), scope.WorkflowID(), "").Get(context.Background(), nil); err != nil {
		t.Fatalf("the workflow did not run to completion: %v", err)
	}
	moved(t, from, to, 930, 70, 1)
}

// Row 8: a run that fails after its retries answers 500; the same key runs it again, once.
func TestFailedRunIsRunAgainByTheSameKey(t *testing.T) {
	bothShapes(t, func(t *testing.T, split bool) {
		testFailedRunIsRunAgainByTheSameKey(t, env.With(t, testenv.Options{Split: split}),
			env.With(t, testenv.Options{RetryFor: time.Second, Split: split}))
	})
}

func testFailedRunIsRunAgainByTheSameKey(t *testing.T, api, impatient *testenv.Env) {
	ownerID, key, from, to := fundedPair(t, 1_000)
	release := env.Hold(t, from) // the posting cannot get its locks until the run gives up
	body := testenv.TransferBody(from, to, 500)

	failed := impatient.Do(t, "POST", "/v1/transfers", key, "fails", body)
	if failed.Status != http.StatusInternalServerError || testenv.ProblemType(t, failed) != "transfer-failed" {
		t.Fatalf("failed run: %d %s", failed.Status, failed.Body)
	}
	id := failed.JSON(t)["transfer_id"].(string)
	got := env.Do(t, "GET", "/v1/transfers/"+id, key, "", "").JSON(t)
	if got["status"] != "failed" {
		t.Fatalf("transfer status %v, want failed", got["status"])
	}
	// Clients read a stable sentence; the error itself (driver, SQL, deadlines) stays in the
	// workflow's history and the worker's log.
	if got["failure_reason"] != "the ledger could not post the transfer within its retry window; no money moved" {
		t.Fatalf("failure_reason %q", got["failure_reason"])
	}
	moved(t, from, to, 1_000, 0, 0)

	release()
	again := api.Do(t, "POST", "/v1/transfers", key, "fails", body)
	if again.Status != http.StatusCreated || again.JSON(t)["id"] != id || again.JSON(t)["status"] != "completed" {
		t.Fatalf("re-run: %d %s", again.Status, again.Body)
	}
	testenv.SameAnswer(t, again, api.Do(t, "POST", "/v1/transfers", key, "fails", body))
	moved(t, from, to, 500, 500, 1)

	runs := env.Executions(t, "transfer/"+ownerID+"/fails")
	statuses := map[enums.WorkflowExecutionStatus]int{}
	for _, r := range runs {
		statuses[r.GetStatus()]++
	}
	if len(runs) != 2 || statuses[enums.WORKFLOW_EXECUTION_STATUS_FAILED] != 1 || statuses[enums.WORKFLOW_EXECUTION_STATUS_COMPLETED] != 1 {
		t.Fatalf("runs %v, want one failed and one completed", statuses)
	}
}

// Row 9: a stored response replays until the cleanup deletes it; the key is then new.
//
// It runs on an environment of its own: a key used again within a 1 ms TTL is legitimate here,
// and a reconcile of the package's shared ledger with that TTL would no longer catch a scope
// that moved money twice within the real one.
func TestExpiredKeyIsNewAfterCleanup(t *testing.T) {
	env := testenv.New(t, "payments_test_api_expiry", testenv.Options{})
	ownerID, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, from, 1_000)
	shortLived := env.With(t, testenv.Options{TTL: time.Millisecond})
	first := shortLived.Do(t, "POST", "/v1/transfers", key, "ttl", testenv.TransferBody(from, to, 100))
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	kept := env.Do(t, "POST", "/v1/transfers", key, "kept", testenv.TransferBody(from, to, 1)) // 24 h TTL
	if kept.Status != http.StatusCreated {
		t.Fatalf("kept: %d %s", kept.Status, kept.Body)
	}
	// Past its TTL but not yet cleaned up: still replayed (the TTL is a minimum).
	testenv.SameAnswer(t, first, env.Do(t, "POST", "/v1/transfers", key, "ttl", testenv.TransferBody(from, to, 100)))

	if res := env.RunCleanup(t); res.Deleted < 1 {
		t.Fatalf("cleanup deleted %d records", res.Deleted)
	}
	wf := "transfer/" + ownerID + "/ttl"
	testenv.SameAnswer(t, kept, env.Do(t, "POST", "/v1/transfers", key, "kept", testenv.TransferBody(from, to, 1)))

	// The key is new: another body is a new transfer, under the same workflow ID.
	second := env.Do(t, "POST", "/v1/transfers", key, "ttl", testenv.TransferBody(from, to, 200))
	if second.Status != http.StatusCreated || second.Header.Get("Idempotent-Replayed") != "" ||
		second.JSON(t)["id"] == first.JSON(t)["id"] || second.JSON(t)["workflow_id"] != wf {
		t.Fatalf("after expiry: %d %s", second.Status, second.Body)
	}
	if again := env.Do(t, "POST", "/v1/transfers", key, "ttl", testenv.TransferBody(from, to, 200)); again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the new use does not replay: %d %s", again.Status, again.Body)
	}
	if runs := env.Executions(t, wf); len(runs) != 2 {
		t.Fatalf("%d runs under %s, want one per use of the key", len(runs), wf)
	}
	scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: "ttl"}
	if first.JSON(t)["id"] != scope.TransferID(0) || second.JSON(t)["id"] != scope.TransferID(1) {
		t.Fatalf("transfer ids %v, %v: want the scope's first and second", first.JSON(t)["id"], second.JSON(t)["id"])
	}
	if env.Balance(t, from) != 699 || env.Balance(t, to) != 301 {
		t.Fatalf("balances %d/%d, want 699/301", env.Balance(t, from), env.Balance(t, to))
	}
	// Three transfers moved money, each once: the first use, kept, the second use.
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE account_id = $1`, to); n != 3 {
		t.Fatalf("%d entries on the destination, want 3", n)
	}
	env.Reconcile(t)
}

// metrics scrapes /metrics and returns each sample as "name{label="value",…}" → value, with
// histograms as their _count.
func metrics(t *testing.T) map[string]float64 {
	t.Helper()
	r := env.Do(t, "GET", "/metrics", "", "", "")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// Row 10: replays, both kinds of conflict, and the latency of replays and new requests are
// counted apart.
func TestIdempotencyMetrics(t *testing.T) {
	_, key, from, to := fundedPair(t, 1_000)
	quick := env.With(t, testenv.Options{SyncWait: 100 * time.Millisecond})
	before := metrics(t)

	body := testenv.TransferBody(from, to, 10)
	first := env.Do(t, "POST", "/v1/transfers", key, "m-1", body)
	if first.Status != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("new: %d %s", first.Status, first.Body)
	}
	replay := env.Do(t, "POST", "/v1/transfers", key, "m-1", body)
	testenv.SameAnswer(t, first, replay)
	if replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the replay does not say it is one")
	}
	if reused := env.Do(t, "POST", "/v1/transfers", key, "m-1", testenv.TransferBody(from, to, 11)); reused.Status != http.StatusUnprocessableEntity ||
		testenv.ProblemType(t, reused) != "idempotency-key-reused" {
		t.Fatalf("reused: %d %s", reused.Status, reused.Body)
	}
	moved(t, from, to, 990, 10, 1)
	release := env.Hold(t, from)
	pending := quick.Do(t, "POST", "/v1/transfers", key, "m-2", body)
	inUse := quick.Do(t, "POST", "/v1/transfers", key, "m-2", body)
	release()
	if pending.Status != http.StatusAccepted || inUse.Status != http.StatusConflict {
		t.Fatalf("held transfer: %d then %d, want 202 then 409", pending.Status, inUse.Status)
	}

	after := metrics(t)
	for name, want := range map[string]float64{
		`payments_idempotent_replays_total{route="/v1/transfers"}`:                                     1,
		`payments_idempotency_conflicts_total{kind="reused",route="/v1/transfers"}`:                    1,
		`payments_idempotency_conflicts_total{kind="in_use",route="/v1/transfers"}`:                    1,
		`payments_http_request_duration_seconds{method="POST",replayed="true",route="/v1/transfers"}`:  1,
		`payments_http_request_duration_seconds{method="POST",replayed="false",route="/v1/transfers"}`: 4,
		`payments_transfers_total{outcome="completed"}`:                                                1,
		`payments_transfers_total{outcome="pending"}`:                                                  1,
	} {
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s rose by %v, want %v", name, got, want)
		}
	}
}

// Rows 3, 5 and 6 on POST /v1/accounts: concurrent duplicates open one account, another body
// under the key is refused, and a refused body leaves its key free.
func TestAccountKeyContract(t *testing.T) {
	_, key := env.Owner(t)
	const n = 20
	answers := make([]testenv.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = env.Do(t, "POST", "/v1/accounts", key, "open", `{"currency":"EUR","name":"Main"}`)
		})
	}
	wg.Wait()
	oneExecution(t, answers)
	other := env.Do(t, "POST", "/v1/accounts", key, "open", `{"currency":"GBP","name":"Main"}`)
	if other.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, other) != "idempotency-key-reused" {
		t.Fatalf("reused: %d %s", other.Status, other.Body)
	}
	if bad := env.Do(t, "POST", "/v1/accounts", key, "second", `{"currency":"XXX"}`); bad.Status != http.StatusBadRequest {
		t.Fatalf("bad currency: %d %s", bad.Status, bad.Body)
	}
	if ok := env.Do(t, "POST", "/v1/accounts", key, "second", `{"currency":"GBP"}`); ok.Status != http.StatusCreated {
		t.Fatalf("corrected body: %d %s", ok.Status, ok.Body)
	}
	list := env.Do(t, "GET", "/v1/accounts", key, "", "").JSON(t)["data"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["id"] != answers[0].JSON(t)["id"] {
		t.Fatalf("accounts %v, want the EUR one and the GBP one", list)
	}
}

// The UI queries the README shows an operator find transfers through Temporal's visibility API,
// with their status kept current.
func TestOperatorQueriesFindTransfers(t *testing.T) {
	ownerID, key, from, to := fundedPair(t, 100)
	impatient := env.With(t, testenv.Options{RetryFor: time.Second})
	if r := env.Do(t, "POST", "/v1/transfers", key, "q-ok", testenv.TransferBody(from, to, 40)); r.Status != http.StatusCreated {
		t.Fatalf("completed: %d", r.Status)
	}
	if r := env.Do(t, "POST", "/v1/transfers", key, "q-poor", testenv.TransferBody(from, to, 1_000)); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("rejected: %d", r.Status)
	}
	release := env.Hold(t, from)
	if r := impatient.Do(t, "POST", "/v1/transfers", key, "q-fail", testenv.TransferBody(from, to, 10)); r.Status != http.StatusInternalServerError {
		t.Fatalf("failed: %d", r.Status)
	}
	release()
	wf := func(k string) string { return "transfer/" + ownerID + "/" + k }
	for query, want := range map[string][]string{
		fmt.Sprintf(`TransferStatus = "failed" AND FromAccount = "%s"`, from):                         {wf("q-fail")},
		fmt.Sprintf(`TransferStatus = "completed" AND ToAccount = "%s"`, to):                          {wf("q-ok")},
		fmt.Sprintf(`TransferStatus = "rejected" AND AmountMinor > 999 AND FromAccount = "%s"`, from): {wf("q-poor")},
		fmt.Sprintf(`FromAccount = "%s" OR ToAccount = "%s"`, to, to):                                 {wf("q-fail"), wf("q-ok"), wf("q-poor")},
	} {
		var got []string
		testenv.WaitFor(t, "visibility to answer "+query, func() bool {
			resp, err := env.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			if err != nil {
				t.Fatalf("%s: %v", query, err)
			}
			got = nil
			for _, ex := range resp.GetExecutions() {
				got = append(got, ex.GetExecution().GetWorkflowId())
			}
			slices.Sort(got)
			return slices.Equal(got, want)
		})
	}
}
