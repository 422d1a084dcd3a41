package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/payments/payments/internal/webhook"
)

// receiver is the owners' systems as the run plays them: one HTTP server on loopback, a path
// per webhook endpoint. It verifies the signature of every delivery, with the endpoint's secret
// and internal/webhook's Verify, as a careful client does, and keeps what arrived. When flaky,
// it takes deliveries badly, as real receivers do, drawn from the seed: it answers 500, answers
// after a while (now and then past the processes' PAYMENTS_WEBHOOK_TIMEOUT), or drops the
// connection, each after it has read and kept the delivery, so that what it kept is what
// reached it.
type receiver struct {
	url   string
	srv   *http.Server
	flaky bool

	mu    sync.Mutex
	rng   *rand.Rand
	hooks map[string]*hook // by path
	bad   []string         // what no receiver should get: unsigned, badly signed, to no endpoint
	fates map[string]int   // how deliveries were taken: "2xx", "500", "slow", "dropped"
}

// hook is one endpoint's side of the receiver.
type hook struct {
	secret string // "" until the endpoint's creation has been answered
	got    []receipt
}

// receipt is a delivery as it arrived, signature verified.
type receipt struct {
	ID, Type string
	At       time.Time
}

// webhookTimeout is the processes' PAYMENTS_WEBHOOK_TIMEOUT: short, so that a slow answer holds
// an endpoint's deliveries back for a second, not ten.
const webhookTimeout = time.Second

// startReceiver listens on a free loopback port.
func startReceiver(seed uint64, flaky bool) (*receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + l.Addr().String(), flaky: flaky, rng: rand.New(rand.NewPCG(seed, 0x5eb400c)),
		hooks: map[string]*hook{}, fates: map[string]int{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// expect makes path an endpoint's, before it is created; register gives it its secret, once
// the creation is answered. A delivery in between (none is due: no money has moved yet) is
// answered 503, for later.
func (r *receiver) expect(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks[path] = &hook{}
}

func (r *receiver) register(path, secret string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks[path].secret = secret
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		return // the sender gave up on it mid-way: nothing reached the receiver
	}
	fate, slow, ok := r.take(req, body)
	if !ok {
		http.Error(w, "refused", http.StatusBadRequest)
		return
	}
	switch fate {
	case "500":
		http.Error(w, "the receiver failed", http.StatusInternalServerError)
	case "slow":
		time.Sleep(slow)
		w.WriteHeader(http.StatusOK)
	case "dropped":
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	case "later":
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// take verifies and keeps one delivery, and draws how it is answered; ok is false for a
// delivery no endpoint of the run's should get (kept in bad).
func (r *receiver) take(req *http.Request, body []byte) (fate string, slow time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hooks[req.URL.Path]
	switch {
	case h == nil:
		r.bad = append(r.bad, fmt.Sprintf("the receiver got a delivery to %s, which is no endpoint's: %.200s", req.URL.Path, body))
		return "", 0, false
	case h.secret == "":
		return "later", 0, true
	}
	sig := req.Header.Get(webhook.SignatureHeader)
	if err := webhook.Verify(h.secret, sig, body, time.Now(), webhook.DefaultTolerance); err != nil {
		r.bad = append(r.bad, fmt.Sprintf("endpoint %s got a delivery whose signature does not verify (%v; %s: %q): %.200s",
			req.URL.Path, err, webhook.SignatureHeader, sig, body))
		return "", 0, false
	}
	var e struct{ ID, Type string }
	if err := json.Unmarshal(body, &e); err != nil || e.ID == "" || req.Header.Get(webhook.EventIDHeader) != e.ID {
		r.bad = append(r.bad, fmt.Sprintf("endpoint %s got a delivery that is not an event, or under another id (%s %q, %v): %.200s",
			req.URL.Path, webhook.EventIDHeader, req.Header.Get(webhook.EventIDHeader), err, body))
		return "", 0, false
	}
	h.got = append(h.got, receipt{ID: e.ID, Type: e.Type, At: time.Now()})
	fate = "2xx"
	if r.flaky {
		switch p := r.rng.IntN(100); {
		case p < 8:
			fate = "500"
		case p < 13:
			fate, slow = "slow", time.Duration(200+r.rng.IntN(1300))*time.Millisecond // past the timeout about half the time
		case p < 17:
			fate = "dropped"
		}
	}
	r.fates[fate]++
	return fate, slow, true
}

// received is a copy of what endpoint path got, in the order it arrived.
func (r *receiver) received(path string) []receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.hooks[path]; h != nil {
		return append([]receipt(nil), h.got...)
	}
	return nil
}

// taken counts the deliveries by how they were answered.
func (r *receiver) taken() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.fates)
}

// refused is what the receiver got that no endpoint should.
func (r *receiver) refused() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}
