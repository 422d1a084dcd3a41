package deliveries_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/api"
	"github.com/payments/payments/deliveries"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/rig/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, "payments_test_webhooks", testenv.Options{})
}

// received is one delivery as a receiver saw it.
type received struct {
	id, typ string
	body    []byte
}

// receiver is a client's webhook endpoint on loopback. It verifies each delivery's signature
// with its own reading of the contract (not package webhook's), and answers with answer(n) for
// the n-th request (from 1), or 200.
type receiver struct {
	srv    *httptest.Server
	answer func(n int) int
	delay  time.Duration // before answering

	mu      sync.Mutex
	secret  string
	n       int
	got     []received
	badSigs []string
}

func newReceiver(t testing.TB, answer func(n int) int) *receiver {
	r := &receiver{answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve)) // 127.0.0.1
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.n++
	n, secret, delay := r.n, r.secret, r.delay
	r.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	status := http.StatusOK
	if r.answer != nil {
		status = r.answer(n)
	}
	var ev struct{ ID, Type string }
	_ = json.Unmarshal(body, &ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if problem := verify(secret, req.Header.Get("Payments-Signature"), body, time.Now()); problem != "" {
		r.badSigs = append(r.badSigs, problem)
	}
	if got := req.Header.Get("Payments-Event-Id"); got != ev.ID {
		r.badSigs = append(r.badSigs, fmt.Sprintf("Payments-Event-Id %q, body id %q", got, ev.ID))
	}
	if status >= 200 && status < 300 {
		r.got = append(r.got, received{ev.ID, ev.Type, body})
	}
	w.WriteHeader(status)
}

// verify checks a Payments-Signature header as docs/contract.md §7 states it, written from
// the text alone: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>, within 5 minutes.
func verify(secret, header string, body []byte, now time.Time) string {
	var t string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			t = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	unix, err := strconv.ParseInt(t, 10, 64)
	if err != nil || len(sigs) == 0 {
		return "malformed signature header " + header
	}
	if d := now.Sub(time.Unix(unix, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return "signature time off by " + d.String()
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(t + "."))
	mac.Write(body)
	want := hex.EncodeToString(mac.Sum(nil))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return ""
		}
	}
	return "no signature matches: " + header
}

// checkSignatures fails t if any request the receiver got was not signed as the contract says.
func (r *receiver) checkSignatures(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.badSigs) > 0 {
		t.Errorf("deliveries whose signature does not verify: %v", r.badSigs)
	}
}

func (r *receiver) delivered() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func (r *receiver) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// subscribe registers r for apiKey's events of types on api and returns the endpoint's id.
func (r *receiver) subscribe(t testing.TB, api *testenv.Env, apiKey string, types ...string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"url": r.srv.URL + "/hooks", "event_types": types})
	resp := api.Do(t, "POST", "/v1/webhook-endpoints", apiKey, "we-"+t.Name()+r.srv.URL, string(b))
	if resp.Status != http.StatusCreated {
		t.Fatalf("POST /v1/webhook-endpoints: %d %s", resp.Status, resp.Body)
	}
	ep := resp.JSON(t)
	r.mu.Lock()
	r.secret = ep["secret"].(string)
	r.mu.Unlock()
	return ep["id"].(string)
}

// feed reads apiKey's whole events feed, page by page of limit.
func feed(t *testing.T, apiKey, typ string, limit int) []map[string]any {
	t.Helper()
	var all []map[string]any
	after := ""
	for {
		path := fmt.Sprintf("/v1/events?limit=%d&type=%s&after=%s", limit, typ, after)
		resp := env.Do(t, "GET", path, apiKey, "", "")
		if resp.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.Status, resp.Body)
		}
		var page struct {
			Data       []map[string]any
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(resp.Body, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Data...)
		if page.NextCursor == nil {
			return all
		}
		after = *page.NextCursor
	}
}

func transfer(t *testing.T, apiKey, idem, from, to string, amount int64) string {
	t.Helper()
	r := env.Do(t, "POST", "/v1/transfers", apiKey, idem, testenv.TransferBody(from, to, amount))
	if r.Status != http.StatusCreated && r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("transfer %s: %d %s", idem, r.Status, r.Body)
	}
	if r.Status == http.StatusUnprocessableEntity {
		return r.JSON(t)["transfer_id"].(string)
	}
	return r.JSON(t)["id"].(string)
}

// TestEventsAreSignedDeliveredAndInTheFeed: every transfer's event reaches the endpoint signed
// with its secret, byte for byte what the feed shows, in the order they committed; the other
// owner's endpoint gets its own side's events only; a rejected transfer's event goes only to a
// subscriber of its type.
func TestEventsAreSignedDeliveredAndInTheFeed(t *testing.T) {
	_, alice := env.Owner(t)
	_, bob := env.Owner(t)
	a, b := env.Account(t, alice, "USD"), env.Account(t, bob, "USD")
	env.Fund(t, a, 1_000)
	all, completedOnly := newReceiver(t, nil), newReceiver(t, nil)
	all.subscribe(t, env, alice, "*")
	bobs := completedOnly.subscribe(t, env, bob, "transfer.completed")

	var ids []string
	for i := range 5 {
		ids = append(ids, transfer(t, alice, fmt.Sprintf("%s-%d", t.Name(), i), a, b, 100))
	}
	rejected := transfer(t, alice, t.Name()+"-too-much", a, b, 1_000_000)

	// alice: the deposit (funding → a), before her endpoint, then five completed, one rejected.
	testenv.WaitForCount(t, "deliveries to alice's endpoint (6 events, no duplicates on a healthy endpoint)", 6,
		func() int { return len(all.delivered()) })
	testenv.WaitForCount(t, "deliveries to bob's endpoint (5 transfer.completed, no duplicates)", 5,
		func() int { return len(completedOnly.delivered()) })
	events := feed(t, alice, "", 2)
	if len(events) != 7 {
		t.Fatalf("alice's feed has %d events, want 7: %v", len(events), events)
	}
	got := all.delivered()
	if len(got) != 6 {
		t.Fatalf("alice's endpoint got %d deliveries, want 6 (no duplicates on a healthy endpoint)", len(got))
	}
	for i, ev := range events[1:] {
		body, _ := json.Marshal(ev)
		if got[i].id != ev["id"] || !jsonEqual(got[i].body, body) {
			t.Errorf("delivery %d is %s, the feed's event %d is %s", i, got[i].body, i, body)
		}
	}
	for i, id := range ids {
		obj := events[i+1]["data"].(map[string]any)["object"].(map[string]any)
		if events[i+1]["type"] != "transfer.completed" || obj["id"] != id || obj["status"] != "completed" {
			t.Errorf("event %d: %v, want transfer.completed of %s", i+1, events[i+1], id)
		}
	}
	last := events[6]
	if last["type"] != "transfer.rejected" || last["data"].(map[string]any)["object"].(map[string]any)["id"] != rejected {
		t.Errorf("last event %v, want transfer.rejected of %s", last, rejected)
	}
	if bobs := feed(t, bob, "", 50); len(bobs) != 6 { // bob sees both sides: the completed five and the rejected one
		t.Errorf("bob's feed has %d events, want 6", len(bobs))
	}
	for _, d := range completedOnly.delivered() {
		if d.typ != "transfer.completed" {
			t.Errorf("bob's endpoint subscribed to transfer.completed got %s", d.typ)
		}
	}
	if n := env.Count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, bobs); n != 5 {
		t.Errorf("bob's endpoint has %d deliveries, want the 5 transfer.completed (not the rejected one)", n)
	}
	if n := len(feed(t, alice, "transfer.rejected", 50)); n != 1 {
		t.Errorf("alice's feed of type transfer.rejected has %d events, want 1", n)
	}
	all.checkSignatures(t)
	completedOnly.checkSignatures(t)
	env.Reconcile(t)
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}

// TestFlakyReceiverGetsEveryEvent: a receiver that answers 500 for its first requests, then 200,
// gets every event, in commit order, and any event twice only with the same id.
func TestFlakyReceiverGetsEveryEvent(t *testing.T) {
	_, alice := env.Owner(t)
	accs := env.FundedAccounts(t, alice, 2, 10_000)
	r := newReceiver(t, func(n int) int {
		if n <= 4 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	endpoint := r.subscribe(t, env, alice, "transfer.completed")
	for i := range 20 {
		transfer(t, alice, fmt.Sprintf("%s-%d", t.Name(), i), accs[i%2], accs[1-i%2], 10)
	}
	events := feed(t, alice, "transfer.completed", 50)
	if len(events) != 22 { // the two deposits and the twenty transfers
		t.Fatalf("feed: %d transfer.completed events, want 22", len(events))
	}
	testenv.WaitForCount(t, "deliveries answered 200 (20 events: a 500 is not delivered, a 200 is not sent again)", 20,
		func() int { return len(r.delivered()) })
	got := r.delivered()
	if n := len(distinct(got)); n != 20 {
		t.Errorf("%d distinct events delivered, want the 20", n)
	}
	events = events[2:] // the deposits came before the endpoint
	for i, d := range distinct(got) {
		if d != events[i]["id"] {
			t.Errorf("delivery %d is %s, want %s: the endpoint's events arrive in commit order", i, d, events[i]["id"])
		}
	}
	if r.requests() < 24 {
		t.Errorf("the receiver saw %d requests: the 4 failed attempts were not all made", r.requests())
	}
	// The run is still going, back to 200, and says so in the UI.
	if info := describe(t, endpoint); info.GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("delivery run %s, want running", info.GetStatus())
	}
	testenv.WaitFor(t, "WebhookStatus back to 200 after a 500 on a transfer.completed", func() bool {
		info := describe(t, endpoint)
		return attr[int64](info, "WebhookStatus") == 200 && attr[string](info, "WebhookEventType") == "transfer.completed"
	})
	if n := env.Count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, endpoint); n != 20 {
		t.Errorf("%d deliveries recorded delivered, want 20", n)
	}
	r.checkSignatures(t) // the attempts again are signed again, with their own time
	env.Reconcile(t)
}

// TestEachEventRefusedOnceIsTakenWithinTheBatch: a receiver that refuses every event the first
// time it sees it gets each on its second attempt, a second later, within the batch: the run
// waits on no timer and schedules fewer batches than there are events, and each delivery row
// says two attempts.
func TestEachEventRefusedOnceIsTakenWithinTheBatch(t *testing.T) {
	_, alice := env.Owner(t)
	accs := env.FundedAccounts(t, alice, 2, 10_000)
	// An endpoint's attempts come one at a time, so the odd requests are each event's first.
	r := newReceiver(t, func(n int) int {
		if n%2 == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	endpoint := r.subscribe(t, env, alice, "transfer.completed")
	for i := range 6 {
		transfer(t, alice, fmt.Sprintf("%s-%d", t.Name(), i), accs[i%2], accs[1-i%2], 10)
	}
	testenv.WaitForCount(t, "the six events delivered", 6, func() int { return len(r.delivered()) })
	if n := r.requests(); n != 12 {
		t.Errorf("the receiver saw %d requests, want 12: each event refused once, then taken", n)
	}
	timers, batches := 0, 0
	for _, ev := range env.History(t, "webhook-delivery/"+endpoint, "") {
		switch ev.GetEventType() {
		case enums.EVENT_TYPE_TIMER_STARTED:
			timers++
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			batches++
		}
	}
	if timers != 0 || batches >= 6 {
		t.Errorf("the run waited on %d timers and ran %d batches for 6 events, each refused once: want no timer, fewer batches than events", timers, batches)
	}
	if n := env.Count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered' AND attempts = 2`, endpoint); n != 6 {
		t.Errorf("%d deliveries delivered at their second attempt, want 6", n)
	}
}

// describe is the latest run of endpoint's delivery workflow.
func describe(t *testing.T, endpoint string) *workflowpb.WorkflowExecutionInfo {
	t.Helper()
	d, err := env.Temporal.DescribeWorkflowExecution(context.Background(), deliveries.WorkflowID(endpoint), "")
	if err != nil {
		t.Fatal(err)
	}
	return d.GetWorkflowExecutionInfo()
}

// attr is the value of a run's search attribute name, or T's zero value.
func attr[T any](info *workflowpb.WorkflowExecutionInfo, name string) T {
	var v T
	if p := info.GetSearchAttributes().GetIndexedFields()[name]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
	}
	return v
}

// distinct is the event ids of ds in the order first seen.
func distinct(ds []received) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range ds {
		if !seen[d.id] {
			seen[d.id] = true
			out = append(out, d.id)
		}
	}
	return out
}

// TestDeadEndpointGivesUpVisiblyAndIsRerun: an endpoint that never answers in time is tried a
// bounded number of times over PAYMENTS_WEBHOOK_RETRY_FOR, its run then fails saying why (and the
// search attributes say which event type and that no answer came), the event stays pending,
// and `payments rerun failed` (RerunFailed) delivers it once the endpoint answers.
func TestDeadEndpointGivesUpVisiblyAndIsRerun(t *testing.T) {
	api := env.With(t, testenv.Options{WebhookRetryFor: 3 * time.Second}) // the Env's worker times an attempt out after 2 s
	_, alice := env.Owner(t)
	accs := env.FundedAccounts(t, alice, 2, 1_000)
	r := newReceiver(t, nil)
	r.mu.Lock()
	r.delay = 3 * time.Second
	r.mu.Unlock()
	endpoint := r.subscribe(t, api, alice, "transfer.completed")
	id := transfer(t, alice, t.Name(), accs[0], accs[1], 10)

	testenv.WaitFor(t, "the delivery run to give up", func() bool {
		return describe(t, endpoint).GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_FAILED
	})
	var appErr *temporal.ApplicationError
	if err := env.Temporal.GetWorkflow(context.Background(), deliveries.WorkflowID(endpoint), "").Get(context.Background(), nil); !errors.As(err, &appErr) ||
		appErr.Type() != "WebhookGaveUp" || !strings.Contains(appErr.Error(), "transfer.completed") {
		t.Errorf("the run ended with %v, want WebhookGaveUp naming the event", err)
	}
	info := describe(t, endpoint)
	if typ, status := attr[string](info, "WebhookEventType"), attr[int64](info, "WebhookStatus"); typ != "transfer.completed" || status != 0 {
		t.Errorf("search attributes WebhookEventType %q, WebhookStatus %d; want transfer.completed, 0 (no answer)", typ, status)
	}
	var attempts int
	var lastError string
	if err := env.DB.QueryRow(context.Background(), `SELECT attempts, last_error FROM webhook_deliveries
		WHERE endpoint_id = $1 AND status = 'pending'`, endpoint).Scan(&attempts, &lastError); err != nil {
		t.Fatalf("the undelivered event is not pending: %v", err)
	}
	// One attempt (2 s), a wait of 1 s, a second attempt: then 3 s have gone by.
	if attempts < 2 || attempts > 3 || !strings.Contains(lastError, "no answer") {
		t.Errorf("%d attempts, last error %q; want 2 or 3 bounded attempts that got no answer", attempts, lastError)
	}
	if env.Balance(t, accs[1]) != 1_010 {
		t.Errorf("the transfer's money: %d", env.Balance(t, accs[1]))
	}

	r.mu.Lock()
	r.delay = 0
	r.mu.Unlock()
	env.Executions(t, deliveries.WorkflowID(endpoint)) // rerun failed finds runs through visibility, which lags
	svc := &deliveries.Service{Ledger: env.Ledger, Temporal: env.Temporal, Converter: testenv.Converter, RetryFor: time.Hour}
	var reruns []string
	if err := svc.RerunFailed(context.Background(), time.Time{}, func(r operation.Rerun) {
		reruns = append(reruns, r.WorkflowID+" "+r.Outcome)
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reruns, deliveries.WorkflowID(endpoint)+" started") {
		t.Fatalf("rerun failed: %v, want %s started", reruns, deliveries.WorkflowID(endpoint))
	}
	testenv.WaitFor(t, "the event delivered after the rerun", func() bool {
		return env.Count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, endpoint) == 1
	})
	for _, d := range r.delivered() { // the late answers of the attempts that timed out count too: same event
		var ev struct {
			Data struct{ Object struct{ ID string } }
		}
		_ = json.Unmarshal(d.body, &ev)
		if d.typ != "transfer.completed" || ev.Data.Object.ID != id {
			t.Errorf("delivered %s of %s, want the one transfer.completed of %s", d.typ, ev.Data.Object.ID, id)
		}
	}
	if ids := distinct(r.delivered()); len(ids) != 1 {
		t.Errorf("the receiver got events %v, want one event, however often", ids)
	}
	r.checkSignatures(t)
}

// A wake signal that fails because Temporal cannot be reached for longer than the signal's own
// retries is sent again once it can: the event it announces is delivered within seconds of
// Temporal coming back, not at the recovery pass, minutes later.
func TestWakeIsSentAgainAfterATemporalBlip(t *testing.T) {
	ownerID, key := env.Owner(t)
	accs := env.FundedAccounts(t, key, 2, 100)
	r := newReceiver(t, nil)
	r.subscribe(t, env, key, "transfer.completed")
	toTemporal := testenv.NewProxy(t, env.TemporalAddr())
	c, err := client.Dial(testenv.ClientOptions(toTemporal.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	svc := &deliveries.Service{Ledger: env.Ledger, Temporal: c, Converter: testenv.Converter, RetryFor: time.Hour}
	l := &ledger.Ledger{DB: env.DB, Wake: svc.Wake}
	post := func(key string) {
		scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: key}
		p := ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(), From: accs[0], To: accs[1],
			AmountMinor: 1, Currency: "USD", Scope: scope, ReplayFor: config.Duration(time.Hour)}
		if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); err != nil {
			t.Fatal(err)
		}
	}
	post("wake-before")
	testenv.WaitFor(t, "the first event delivered", func() bool { return len(r.delivered()) == 1 })
	time.Sleep(time.Second) // settle: the run goes back to sleep, waiting for a wake

	toTemporal.Cut()
	t.Cleanup(toTemporal.Restore)
	post("wake-blip")
	time.Sleep(12 * time.Second) // longer than one wake's own retries (10 s): it fails meanwhile
	if got := r.delivered(); len(got) != 1 {
		t.Fatalf("delivered %d events while the only wake of the second could not reach Temporal, want 1", len(got))
	}
	toTemporal.Restore()
	testenv.WaitFor(t, "the second event delivered after Temporal came back", func() bool { return len(r.delivered()) == 2 })
}

// Events that keep coming to one endpoint from one process cost its run about one wake signal a
// second, not one per event or per 100 ms: each signal is a workflow task in the run's history,
// which a worker that lost its cache must replay within the task's timeout. Every event is
// delivered all the same: the run drains the outbox, not the signals.
func TestBusyEndpointIsWokenAboutOnceASecond(t *testing.T) {
	ownerID, key := env.Owner(t)
	accs := env.FundedAccounts(t, key, 2, 1000)
	r := newReceiver(t, nil)
	endpoint := r.subscribe(t, env, key, "transfer.completed")
	svc := &deliveries.Service{Ledger: env.Ledger, Temporal: env.Temporal, Converter: testenv.Converter, RetryFor: time.Hour}
	l := &ledger.Ledger{DB: env.DB, Wake: svc.Wake}
	const span, every = 4 * time.Second, 20 * time.Millisecond
	n := 0
	for start := time.Now(); time.Since(start) < span; n++ {
		scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: fmt.Sprintf("busy-%d", n)}
		p := ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(), From: accs[0], To: accs[1],
			AmountMinor: 1, Currency: "USD", Scope: scope, ReplayFor: config.Duration(time.Hour)}
		if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); err != nil {
			t.Fatal(err)
		}
		time.Sleep(every)
	}
	testenv.WaitFor(t, "every event delivered", func() bool { return len(r.delivered()) == n })
	time.Sleep(2 * time.Second) // settle: the last signals land
	signals := 0
	for _, e := range env.History(t, "webhook-delivery/"+endpoint, "") {
		if e.GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED {
			signals++
		}
	}
	// One a second over the span, the first few seconds' faster ones (0.1 s, 0.2 s, 0.4 s, 0.8 s)
	// and the one that starts the run; one per 100 ms would be 40.
	if limit := int(span/time.Second) + 6; signals > limit {
		t.Errorf("%d wake signals for %d events over %s from one process, want at most %d", signals, n, span, limit)
	}
}

// A delivery run that completed while its endpoint still exists (it took the endpoint for
// deleted) leaves that endpoint's events to no one: the recovery pass starts it again, and the
// events it had missed are delivered.
func TestRecoveryStartsARunThatCompletedWhileItsEndpointExists(t *testing.T) {
	ownerID, key := env.Owner(t)
	accs := env.FundedAccounts(t, key, 2, 100)
	r := newReceiver(t, nil)
	endpoint := r.subscribe(t, env, key, "transfer.completed")
	svc := &deliveries.Service{Ledger: env.Ledger, Temporal: env.Temporal, Converter: testenv.Converter, RetryFor: time.Hour}
	l := &ledger.Ledger{DB: env.DB, Wake: svc.Wake}
	post := func(key string) {
		scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: key}
		p := ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(), From: accs[0], To: accs[1],
			AmountMinor: 1, Currency: "USD", Scope: scope, ReplayFor: config.Duration(time.Hour)}
		if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); err != nil {
			t.Fatal(err)
		}
	}
	setDeleted := func(deleted bool) {
		if _, err := env.DB.Exec(context.Background(), `UPDATE webhook_endpoints SET deleted_at = CASE WHEN $2 THEN now() END WHERE id = $1`,
			endpoint, deleted); err != nil {
			t.Fatal(err)
		}
	}
	setDeleted(true)
	svc.Wake([]string{endpoint})
	testenv.WaitFor(t, "the run completed", func() bool {
		return describe(t, endpoint).GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	setDeleted(false)
	post("after-completed")
	time.Sleep(2 * time.Second) // settle: the wake finds the run closed and starts nothing
	if got := r.delivered(); len(got) != 0 {
		t.Fatalf("%d events delivered with the run completed, want 0 (the premise)", len(got))
	}
	if tally, err := svc.ResolveStale(context.Background(), 0); err != nil || tally.Started != 1 {
		t.Fatalf("recovery pass: %+v, %v; want one run started", tally, err)
	}
	testenv.WaitFor(t, "the missed event delivered after the recovery pass", func() bool { return len(r.delivered()) == 1 })
}

// TestDeletedEndpointStops: deleting an endpoint cancels its pending deliveries and its run,
// and later events are not queued for it.
func TestDeletedEndpointStops(t *testing.T) {
	_, alice := env.Owner(t)
	accs := env.FundedAccounts(t, alice, 2, 1_000)
	r := newReceiver(t, func(int) int { return http.StatusServiceUnavailable })
	endpoint := r.subscribe(t, env, alice, "*")
	transfer(t, alice, t.Name()+"-1", accs[0], accs[1], 10)
	testenv.WaitFor(t, "a second attempt", func() bool { return r.requests() >= 2 })

	if resp := env.Do(t, "DELETE", "/v1/webhook-endpoints/"+endpoint, alice, "", ""); resp.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.Status, resp.Body)
	}
	testenv.WaitFor(t, "the delivery run canceled (or ended, having seen the deletion first)", func() bool {
		st := describe(t, endpoint).GetStatus()
		return st == enums.WORKFLOW_EXECUTION_STATUS_CANCELED || st == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	seen := r.requests()
	transfer(t, alice, t.Name()+"-2", accs[1], accs[0], 10)
	testenv.WaitForCount(t, "requests to the deleted endpoint", seen, r.requests)
	if n := env.Count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status <> 'canceled'`, endpoint); n != 0 {
		t.Errorf("%d deliveries of the deleted endpoint not canceled", n)
	}
	if resp := env.Do(t, "DELETE", "/v1/webhook-endpoints/"+endpoint, alice, "", ""); resp.Status != http.StatusNotFound {
		t.Errorf("DELETE again: %d, want 404", resp.Status)
	}
	if resp := env.Do(t, "GET", "/v1/webhook-endpoints", alice, "", ""); strings.Contains(string(resp.Body), endpoint) {
		t.Errorf("the deleted endpoint is still listed: %s", resp.Body)
	}
}

// TestEndpointRequestsAreCheckedAndIdempotent: unsafe URLs are refused when insecure URLs are
// off (loopback only is tried: nothing else is ever a target here), bad bodies are refused,
// nothing is stored for either, and a retried creation replays the first answer, secret and all.
func TestEndpointRequestsAreCheckedAndIdempotent(t *testing.T) {
	secure := env.With(t, testenv.Options{WebhookSecure: true})
	owner, alice := env.Owner(t)
	for i, body := range []string{
		`{"url":"http://127.0.0.1:9/hooks","event_types":["*"]}`,
		`{"url":"https://127.0.0.1:9/hooks","event_types":["*"]}`,
		`{"url":"https://localhost:9/hooks","event_types":["*"]}`,
		`{"url":"http://localhost:9/hooks","event_types":["*"]}`,
		`{"url":"https://[::1]:9/hooks","event_types":["*"]}`,
		`{"url":"https://user:pw@127.0.0.1:9/hooks","event_types":["*"]}`,
	} {
		resp := secure.Do(t, "POST", "/v1/webhook-endpoints", alice, fmt.Sprintf("%s-url-%d", t.Name(), i), body)
		if resp.Status != http.StatusBadRequest || !strings.Contains(string(resp.Body), `"field":"url"`) {
			t.Errorf("%s: %d %s, want 400 naming url", body, resp.Status, resp.Body)
		}
	}
	for i, body := range []string{
		`{"url":"http://127.0.0.1:9/hooks","event_types":[]}`,
		`{"url":"http://127.0.0.1:9/hooks","event_types":["transfer.done"]}`,
		`{"url":"http://127.0.0.1:9/hooks","event_types":["*","payout.paid"]}`,
		`{"url":"http://127.0.0.1:9/hooks","event_types":["payout.paid","payout.paid"]}`,
		`{"url":"","event_types":["*"]}`,
		`{"url":"http://127.0.0.1:9/hooks","event_types":["*"],"secret":"mine"}`,
	} {
		resp := env.Do(t, "POST", "/v1/webhook-endpoints", alice, fmt.Sprintf("%s-body-%d", t.Name(), i), body)
		if resp.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", body, resp.Status, resp.Body)
		}
	}
	if n := env.Count(t, `SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1`, owner) +
		env.Count(t, `SELECT count(*) FROM idempotency_records WHERE owner_id = $1`, owner); n != 0 {
		t.Fatalf("refused requests stored %d rows", n)
	}

	body := `{"url":"http://127.0.0.1:9/hooks","event_types":["payout.paid"]}`
	first := env.Do(t, "POST", "/v1/webhook-endpoints", alice, t.Name(), body)
	again := env.Do(t, "POST", "/v1/webhook-endpoints", alice, t.Name(), body)
	if first.Status != http.StatusCreated || again.Status != http.StatusCreated || string(first.Body) != string(again.Body) ||
		again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retried creation: %d %s, then %d %s", first.Status, first.Body, again.Status, again.Body)
	}
	if other := env.Do(t, "POST", "/v1/webhook-endpoints", alice, t.Name(), `{"url":"http://127.0.0.1:9/other","event_types":["payout.paid"]}`); other.Status != http.StatusUnprocessableEntity {
		t.Errorf("same key, other body: %d %s, want 422", other.Status, other.Body)
	}
	list := env.Do(t, "GET", "/v1/webhook-endpoints", alice, "", "")
	if strings.Contains(string(list.Body), "whsec_") || !strings.Contains(string(list.Body), first.JSON(t)["id"].(string)) {
		t.Errorf("GET /v1/webhook-endpoints: %s (one endpoint, no secret)", list.Body)
	}
	if n := env.Count(t, `SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1`, owner); n != 1 {
		t.Errorf("%d endpoints, want 1", n)
	}
}

// TestEndpointsPerOwnerAreBounded: an owner has at most ledger.MaxEndpoints endpoints at once;
// one more is a 422 that stores nothing, so that the same request with the same key registers
// once an endpoint is deleted. Another owner is not counted against it.
func TestEndpointsPerOwnerAreBounded(t *testing.T) {
	owner, alice := env.Owner(t)
	_, bob := env.Owner(t)
	const limit = 16 // the contract's (docs/contract.md §7)
	body := `{"url":"http://127.0.0.1:9/hooks","event_types":["payout.paid"]}`
	var first string
	for i := range limit {
		resp := env.Do(t, "POST", "/v1/webhook-endpoints", alice, fmt.Sprintf("%s-%d", t.Name(), i), body)
		if resp.Status != http.StatusCreated {
			t.Fatalf("endpoint %d: %d %s", i+1, resp.Status, resp.Body)
		}
		if i == 0 {
			first = resp.JSON(t)["id"].(string)
		}
	}
	over := env.Do(t, "POST", "/v1/webhook-endpoints", alice, t.Name()+"-over", body)
	if over.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, over) != "too-many-webhook-endpoints" {
		t.Fatalf("endpoint %d: %d %s, want 422 too-many-webhook-endpoints", limit+1, over.Status, over.Body)
	}
	if n := env.Count(t, `SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1`, owner); n != limit {
		t.Fatalf("%d endpoints stored, want %d", n, limit)
	}
	if n := env.Count(t, `SELECT count(*) FROM idempotency_records WHERE owner_id = $1 AND key = $2`, owner, t.Name()+"-over"); n != 0 {
		t.Fatalf("the refused request stored its key")
	}
	if resp := env.Do(t, "POST", "/v1/webhook-endpoints", bob, t.Name()+"-bob", body); resp.Status != http.StatusCreated {
		t.Fatalf("another owner's first endpoint: %d %s", resp.Status, resp.Body)
	}
	if resp := env.Do(t, "DELETE", "/v1/webhook-endpoints/"+first, alice, "", ""); resp.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.Status, resp.Body)
	}
	if again := env.Do(t, "POST", "/v1/webhook-endpoints", alice, t.Name()+"-over", body); again.Status != http.StatusCreated {
		t.Fatalf("the same request once one is deleted: %d %s, want 201", again.Status, again.Body)
	}
	if n := env.Count(t, `SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1 AND deleted_at IS NULL`, owner); n != limit {
		t.Errorf("%d endpoints, want %d", n, limit)
	}
}

// TestFeedQueriesAreChecked: a bad limit, type or cursor is a 400; another owner's event is not
// a cursor; an owner without events reads an empty page.
func TestFeedQueriesAreChecked(t *testing.T) {
	_, alice := env.Owner(t)
	_, bob := env.Owner(t)
	env.FundedAccounts(t, bob, 1, 5)
	theirs := feed(t, bob, "", 10)[0]["id"].(string)
	for _, q := range []string{"limit=0", "limit=201", "limit=x", "type=transfer.done", "after=" + theirs, "after=evt_nope"} {
		if resp := env.Do(t, "GET", "/v1/events?"+q, alice, "", ""); resp.Status != http.StatusBadRequest {
			t.Errorf("GET /v1/events?%s: %d %s, want 400", q, resp.Status, resp.Body)
		}
	}
	resp := env.Do(t, "GET", "/v1/events", alice, "", "")
	if resp.Status != http.StatusOK || strings.TrimSpace(string(resp.Body)) != `{"data":[],"next_cursor":null}` {
		t.Errorf("an empty feed: %d %s", resp.Status, resp.Body)
	}
}

// TestThousandTransfersInCommitOrderPerAccount: 1,000 transfers sent concurrently among four
// accounts give 1,000 transfer.completed events in the feed, and each account's events come in
// the order its entries were written (the order its postings committed).
func TestThousandTransfersInCommitOrderPerAccount(t *testing.T) {
	_, alice := env.Owner(t)
	accs := env.FundedAccounts(t, alice, 4, 1_000_000)
	const n, clients = 1000, 8
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n; i += clients {
				from, to := i%4, (i/4+1+i)%4
				if from == to {
					to = (to + 1) % 4
				}
				r := env.Do(t, "POST", "/v1/transfers", alice, fmt.Sprintf("%s-%d", t.Name(), i), testenv.TransferBody(accs[from], accs[to], 1))
				if r.Status != http.StatusCreated {
					t.Errorf("transfer %d: %d %s", i, r.Status, r.Body)
				}
			}
		}()
	}
	wg.Wait()
	events := feed(t, alice, "transfer.completed", 200)
	if len(events) != n+4 { // and the four deposits
		t.Fatalf("%d transfer.completed events, want %d", len(events), n+4)
	}
	inFeed := map[string][]string{}
	for _, ev := range events {
		obj := ev["data"].(map[string]any)["object"].(map[string]any)
		for _, side := range []string{"from_account_id", "to_account_id"} {
			acc := obj[side].(string)
			inFeed[acc] = append(inFeed[acc], obj["id"].(string))
		}
	}
	for _, acc := range accs {
		rows, err := env.DB.Query(context.Background(), `SELECT transfer_id FROM entries WHERE account_id = $1 ORDER BY id`, acc)
		if err != nil {
			t.Fatal(err)
		}
		var inLedger []string
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			inLedger = append(inLedger, id)
		}
		if strings.Join(inLedger, ",") != strings.Join(inFeed[acc], ",") {
			t.Errorf("account %s: the feed's order is not the ledger's (%d entries, %d events)", acc, len(inLedger), len(inFeed[acc]))
		}
	}
	env.Reconcile(t)
}
