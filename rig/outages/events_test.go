package outages

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payments/payments/rig/testenv"
)

// TestWorkerKilledMidPosting: postings held on their accounts' locks when their worker is killed
// never commit (their client is gone, so no COMMIT comes), and write no event. A second worker
// posts each once: each transfer has exactly one event, of its outcome, and the owner's webhook
// endpoint receives each of them, none of the rolled-back attempt.
func TestWorkerKilledMidPosting(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_midposting", testenv.Options{NoWorker: true})
	first := env.Process(t, testenv.BuildPayments(t), env.TemporalAddr(), []string{"worker"},
		"DATABASE_URL="+env.URL+"&pool_max_conns=32")
	ownerID, apiKey, ts, funding := pairs(t, env, "midpost", 10, 60, 100)
	ids, _ := keysOf(ownerID, ts)

	var mu sync.Mutex
	got := map[string]int{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("Payments-Event-Id")]++
		mu.Unlock()
	}))
	defer receiver.Close()
	if r := env.Do(t, "POST", "/v1/webhook-endpoints", apiKey, "midpost-hooks",
		fmt.Sprintf(`{"url":%q,"event_types":["transfer.completed","transfer.rejected"]}`, receiver.URL)); r.Status != http.StatusCreated {
		t.Fatalf("POST /v1/webhook-endpoints: %d %s", r.Status, r.Body)
	}

	a := newAnswers("held")
	release := a.sendHeld(t, env, apiKey, ts) // every posting waits on its accounts' locks
	replaceWorker(t, env, first)
	release()
	a.setPhase("second worker")
	a.sendAll(t, env, apiKey, ts)
	a.settle(t, env, ownerID, ts, funding) // one event each, of its outcome; the ledger reconciles

	want := env.Count(t, `SELECT count(*) FROM events e JOIN transfers t ON t.id = e.object_id WHERE t.workflow_id = ANY($1)`, ids)
	testenv.WaitForCount(t, "deliveries to the endpoint (one per event, no duplicates on a healthy endpoint)", want, func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range got {
			n += c
		}
		return n
	})
	mu.Lock()
	defer mu.Unlock()
	if want != len(ts) || len(got) != want {
		t.Errorf("%d events for %d transfers, %d of them delivered", want, len(ts), len(got))
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s delivered %d times to a healthy endpoint", id, n)
		}
	}
}

// TestWorkerKilledMidDelivery: the worker delivering an endpoint's event is killed while the
// endpoint holds the request open. The batch's heartbeat stops, so another worker takes the
// batch again within the heartbeat timeout (seconds; a minute is WaitFor's deadline) and the
// event is delivered: the endpoint gets it twice (at least once), and the delivery is recorded.
func TestWorkerKilledMidDelivery(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_middelivery", testenv.Options{NoWorker: true})
	first := env.Process(t, testenv.BuildPayments(t), env.TemporalAddr(), []string{"worker"}, "DATABASE_URL="+env.URL,
		"PAYMENTS_WEBHOOK_ALLOW_INSECURE=true") // its receiver is on loopback
	_, apiKey := env.Owner(t)
	accs := env.FundedAccounts(t, apiKey, 2, 100)

	arrived := make(chan string, 8)
	var requests atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // read whole, so that the server notices the sender going away
		arrived <- r.Header.Get("Payments-Event-Id")
		if requests.Add(1) == 1 { // the first request: held until its sender is gone
			<-r.Context().Done()
		}
	}))
	defer receiver.Close()
	if r := env.Do(t, "POST", "/v1/webhook-endpoints", apiKey, "middelivery-hooks",
		fmt.Sprintf(`{"url":%q,"event_types":["transfer.completed"]}`, receiver.URL)); r.Status != http.StatusCreated {
		t.Fatalf("POST /v1/webhook-endpoints: %d %s", r.Status, r.Body)
	}
	if r := env.Do(t, "POST", "/v1/transfers", apiKey, "middelivery-1", testenv.TransferBody(accs[0], accs[1], 10)); r.Status != http.StatusCreated {
		t.Fatalf("transfer: %d %s", r.Status, r.Body)
	}
	event := receive(t, "the first delivery attempt", arrived)
	replaceWorker(t, env, first)
	again := receive(t, "the event delivered again by the second worker", arrived)
	if again != event {
		t.Fatalf("the second delivery is of %s, want %s", again, event)
	}
	testenv.WaitFor(t, "the delivery recorded", func() bool {
		return env.Count(t, `SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
			WHERE e.id = $1 AND d.status = 'delivered'`, event) == 1
	})
}

// TestDatabaseCutMidDelivery: PostgreSQL is cut off while the endpoint takes an event, and
// comes back two seconds later. The batch waits for it to record the delivery instead of failing
// and sending the event again after a backoff: the endpoint gets the event once, and the
// delivery is recorded.
func TestDatabaseCutMidDelivery(t *testing.T) {
	toPostgres := testenv.NewProxy(t, testenv.PostgresAddr())
	env := testenv.New(t, "payments_test_faults_cutdelivery", testenv.Options{DatabaseHost: toPostgres.Addr()})
	_, apiKey := env.Owner(t)
	accs := env.FundedAccounts(t, apiKey, 2, 100)

	var mu sync.Mutex
	got := map[string]int{}
	var cut sync.Once
	restored := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("Payments-Event-Id")]++
		mu.Unlock()
		cut.Do(func() { // the event has arrived; its delivery is yet to be recorded
			toPostgres.Cut()
			time.AfterFunc(2*time.Second, func() { toPostgres.Restore(); close(restored) })
		})
	}))
	defer receiver.Close()
	t.Cleanup(toPostgres.Restore) // before the Env stops, if the test stops early
	if r := env.Do(t, "POST", "/v1/webhook-endpoints", apiKey, "cutdelivery-hooks",
		fmt.Sprintf(`{"url":%q,"event_types":["transfer.completed"]}`, receiver.URL)); r.Status != http.StatusCreated {
		t.Fatalf("POST /v1/webhook-endpoints: %d %s", r.Status, r.Body)
	}
	if r := env.Do(t, "POST", "/v1/transfers", apiKey, "cutdelivery-1", testenv.TransferBody(accs[0], accs[1], 10)); r.Status != http.StatusCreated {
		t.Fatalf("transfer: %d %s", r.Status, r.Body)
	}
	select { // the test reads the ledger through the proxy too
	case <-restored:
	case <-time.After(time.Minute):
		t.Fatal("the event never reached the endpoint")
	}
	var event string
	testenv.WaitFor(t, "the delivery recorded after PostgreSQL came back", func() bool {
		return env.Count(t, `SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
			WHERE e.type = 'transfer.completed' AND d.status = 'delivered' AND d.attempts = 1`) == 1
	})
	time.Sleep(2 * time.Second) // settle: a batch that gave up would be sending it again by now
	mu.Lock()
	defer mu.Unlock()
	for id, n := range got {
		event = id
		if n != 1 {
			t.Errorf("event %s sent %d times; the batch should have waited out the cut to record it once", id, n)
		}
	}
	if len(got) != 1 || event == "" {
		t.Errorf("the endpoint got %v, want the one transfer's event once", got)
	}
}

// replaceWorker kills the worker process first (SIGKILL) and starts a worker in the test's
// process in its place, stopped when t ends.
func replaceWorker(t *testing.T, env *testenv.Env, first *exec.Cmd) {
	t.Helper()
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	second := env.NewWorker(nil)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
}

// receive waits for what comes on c, as what names it.
func receive(t *testing.T, what string, c <-chan string) string {
	t.Helper()
	var got string
	testenv.WaitFor(t, what, func() bool {
		select {
		case got = <-c:
			return true
		default:
			return false
		}
	})
	return got
}
