package outages

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

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
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	second := env.NewWorker(nil)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
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
