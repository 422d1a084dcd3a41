package banksim

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testSecret = "test-bank-secret"

// Account numbers whose outcome the simulator fixes (docs/bank.md, "Lifecycle").
const (
	acctPaid     = "000123456789"
	acctFails    = "000123450002"
	acctReturned = "000123450003"
)

// --- the callback receiver: what the processor would be, with its own signature check ---

type delivery struct {
	ID, Type, Body, Signature string
	Data                      map[string]any
	Status                    int // what the receiver answered
}

type receiver struct {
	t        *testing.T
	srv      *httptest.Server
	failNext atomic.Int64 // answer 500 to this many more requests
	mu       sync.Mutex
	got      []delivery
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{t: t}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) url() string { return rc.srv.URL + "/v1/bank/events" }

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sig := r.Header.Get("Bank-Signature")
	if err := verifySignature(testSecret, sig, body); err != nil {
		rc.t.Errorf("callback with a bad signature %q: %v (body %s)", sig, err, body)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev struct {
		ID        string         `json:"id"`
		Type      string         `json:"type"`
		CreatedAt time.Time      `json:"created_at"`
		Data      map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" || ev.CreatedAt.IsZero() {
		rc.t.Errorf("callback body %s: %v", body, err)
	}
	status := http.StatusOK
	if rc.failNext.Add(-1) >= 0 {
		status = http.StatusInternalServerError
	}
	rc.mu.Lock()
	rc.got = append(rc.got, delivery{ID: ev.ID, Type: ev.Type, Body: string(body), Signature: sig, Data: ev.Data, Status: status})
	rc.mu.Unlock()
	w.WriteHeader(status)
}

// verifySignature is the processor's check, written independently of the simulator's sign.
func verifySignature(secret, header string, body []byte) error {
	var ts, v1 string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
		return fmt.Errorf("t: %v", err)
	}
	got, err := hex.DecodeString(v1)
	if err != nil {
		return fmt.Errorf("v1: %v", err)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Errorf("v1 does not match")
	}
	return nil
}

// deliveries are what the receiver got, in order; of returns those of one event.
func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

func (rc *receiver) of(eventType, paymentID string) []delivery {
	var out []delivery
	for _, d := range rc.deliveries() {
		if d.Type == eventType && (paymentID == "" || d.Data["payment_id"] == paymentID) {
			out = append(out, d)
		}
	}
	return out
}

// --- the simulator under test ---

type bank struct {
	*Sim
	t   *testing.T
	srv *httptest.Server
}

// fastFaults settle, return and retry in milliseconds.
func fastFaults() Faults {
	f := DefaultFaults()
	f.SettleAfter = 5 * time.Millisecond
	f.ReturnAfter = 10 * time.Millisecond
	f.CallbackRetryBase = time.Millisecond
	return f
}

func startBank(t *testing.T, rc *receiver, f Faults, state string) *bank {
	t.Helper()
	sim, err := New(Config{CallbackURL: rc.url(), Secret: testSecret, StateFile: state, Seed: 7, Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	b := &bank{Sim: sim, t: t, srv: httptest.NewServer(sim.Handler())}
	t.Cleanup(b.stop)
	return b
}

// stop is a clean stop: no more requests, then the simulator.
func (b *bank) stop() {
	b.srv.Close()
	if err := b.Close(); err != nil {
		b.t.Error(err)
	}
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (b *bank) do(method, path, key, body string, out any) int {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

func instruction(acct, ref string, amount int64) string {
	return fmt.Sprintf(`{"amount_minor": %d, "currency": "USD", "destination": {"account_number": %q, "bank_code": "BANKUS33"}, "reference": %q}`,
		amount, acct, ref)
}

// pay sends an instruction that must be accepted (201).
func (b *bank) pay(key, acct string) Payment {
	b.t.Helper()
	var p Payment
	if code := b.do("POST", "/payments", key, instruction(acct, "po_"+key, 1250), &p); code != http.StatusCreated {
		b.t.Fatalf("POST /payments: %d, want 201", code)
	}
	return p
}

func (b *bank) get(id string) Payment {
	b.t.Helper()
	var p Payment
	if code := b.do("GET", "/payments/"+id, "", "", &p); code != http.StatusOK {
		b.t.Fatalf("GET /payments/%s: %d", id, code)
	}
	return p
}

func (b *bank) statement() []Payment {
	b.t.Helper()
	var st struct{ Data []Payment }
	if code := b.do("GET", "/payments", "", "", &st); code != http.StatusOK {
		b.t.Fatalf("GET /payments: %d", code)
	}
	return st.Data
}

func (b *bank) events() []eventJSON {
	b.t.Helper()
	var out struct{ Data []eventJSON }
	if code := b.do("GET", "/admin/events", "", "", &out); code != http.StatusOK {
		b.t.Fatalf("GET /admin/events: %d", code)
	}
	return out.Data
}

type eventJSON struct {
	ID       string
	Type     string
	Delivery string
	Attempts []Attempt
	Body     json.RawMessage
}

// waitStatus waits for a payment to reach status.
func (b *bank) waitStatus(id, status string) Payment {
	b.t.Helper()
	var p Payment
	waitFor(b.t, "payment "+id+" "+status, func() bool { p = b.get(id); return p.Status == status })
	return p
}

// waitFor polls cond until it holds, failing the test after a deadline: states are waited
// for, never slept for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// --- the rail API ---

func TestInstructionIsIdempotent(t *testing.T) {
	f := fastFaults()
	f.SettleAfter = time.Hour
	b := startBank(t, newReceiver(t), f, "")
	p := b.pay("k1", acctPaid)
	if p.Status != statusPending || !strings.HasPrefix(p.ID, "pay_") || p.IdempotencyKey != "k1" || p.Reference != "po_k1" ||
		p.AmountMinor != 1250 || p.Currency != "USD" || p.Destination.BankCode != "BANKUS33" || p.Reason != nil || p.SettledAt != nil {
		t.Fatalf("new payment: %+v", p)
	}
	var again Payment
	if code := b.do("POST", "/payments", "k1", instruction(acctPaid, "po_k1", 1250), &again); code != http.StatusOK || again.ID != p.ID {
		t.Fatalf("same key, same body: %d %+v, want 200 and %s", code, again, p.ID)
	}
	var e map[string]string
	if code := b.do("POST", "/payments", "k1", instruction(acctPaid, "po_k1", 1251), &e); code != http.StatusConflict ||
		e["error"] != "idempotency_key_reused" {
		t.Fatalf("same key, other body: %d %v, want 409 idempotency_key_reused", code, e)
	}
	b.pay("k2", acctPaid)
	st := b.statement()
	if len(st) != 2 || st[0].ID != p.ID || st[0].AmountMinor != 1250 || st[1].IdempotencyKey != "k2" {
		t.Fatalf("statement: %+v", st)
	}
}

func TestConcurrentDuplicatesMakeOnePayment(t *testing.T) {
	b := startBank(t, newReceiver(t), fastFaults(), "")
	var wg sync.WaitGroup
	var created atomic.Int32
	ids := make([]string, 50)
	for i := range ids {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", b.srv.URL+"/payments", strings.NewReader(instruction(acctPaid, "po_dup", 100)))
			req.Header.Set("Idempotency-Key", "dup")
			resp, err := b.srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var p Payment
			_ = json.NewDecoder(resp.Body).Decode(&p)
			if resp.StatusCode == http.StatusCreated {
				created.Add(1)
			} else if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d", resp.StatusCode)
			}
			ids[i] = p.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("ids %v: want one", ids)
		}
	}
	if created.Load() != 1 || len(b.statement()) != 1 {
		t.Fatalf("%d answers 201, %d payments; want 1 and 1", created.Load(), len(b.statement()))
	}
}

func TestLookupByKeyAndID(t *testing.T) {
	f := fastFaults()
	f.SettleAfter = time.Hour
	b := startBank(t, newReceiver(t), f, "")
	p := b.pay("order/42", acctPaid)
	var byKey Payment
	if code := b.do("GET", "/payments?idempotency_key=order%2F42", "", "", &byKey); code != http.StatusOK || byKey.ID != p.ID {
		t.Fatalf("by key: %d %+v", code, byKey)
	}
	if got := b.get(p.ID); got.ID != p.ID || got.IdempotencyKey != "order/42" {
		t.Fatalf("by id: %+v", got)
	}
	var e map[string]string
	if code := b.do("GET", "/payments?idempotency_key=never-sent", "", "", &e); code != http.StatusNotFound || e["error"] != "not_found" {
		t.Fatalf("unknown key: %d %v", code, e)
	}
	if code := b.do("GET", "/payments/pay_nope", "", "", &e); code != http.StatusNotFound || e["error"] != "not_found" {
		t.Fatalf("unknown id: %d %v", code, e)
	}
}

func TestInvalidInstructions(t *testing.T) {
	b := startBank(t, newReceiver(t), fastFaults(), "")
	for name, body := range map[string]string{
		"zero amount":      instruction(acctPaid, "po_1", 0),
		"negative amount":  instruction(acctPaid, "po_1", -5),
		"currency":         strings.Replace(instruction(acctPaid, "po_1", 1), "USD", "XXX", 1),
		"account number":   instruction("12-34", "po_1", 1),
		"bank code":        strings.Replace(instruction(acctPaid, "po_1", 1), "BANKUS33", "bank", 1),
		"no reference":     instruction(acctPaid, "", 1),
		"no destination":   `{"amount_minor": 1, "currency": "USD", "reference": "po_1"}`,
		"unknown field":    strings.Replace(instruction(acctPaid, "po_1", 1), `"amount_minor"`, `"amount": 1, "amount_minor"`, 1),
		"fractional":       strings.Replace(instruction(acctPaid, "po_1", 1), `"amount_minor": 1`, `"amount_minor": 1.5`, 1),
		"not JSON":         `amount=1`,
		"empty":            ``,
		"two JSON objects": instruction(acctPaid, "po_1", 1) + instruction(acctPaid, "po_1", 1),
	} {
		var e map[string]string
		if code := b.do("POST", "/payments", "key-"+strings.ReplaceAll(name, " ", "-"), body, &e); code != http.StatusUnprocessableEntity ||
			e["error"] != "invalid_instruction" || e["reason"] == "" {
			t.Errorf("%s: %d %v, want 422 invalid_instruction with a reason", name, code, e)
		}
	}
	var e map[string]string
	if code := b.do("POST", "/payments", "", instruction(acctPaid, "po_1", 1), &e); code != http.StatusBadRequest {
		t.Errorf("no Idempotency-Key: %d %v, want 400", code, e)
	}
	if code := b.do("POST", "/payments", "with space", instruction(acctPaid, "po_1", 1), &e); code != http.StatusBadRequest {
		t.Errorf("Idempotency-Key with a space: %d %v, want 400", code, e)
	}
	if st := b.statement(); len(st) != 0 {
		t.Fatalf("statement: %+v, want nothing", st)
	}
}

// --- lifecycle and callbacks ---

func TestPaymentIsPaid(t *testing.T) {
	rc := newReceiver(t)
	b := startBank(t, rc, fastFaults(), "")
	p := b.pay("k", acctPaid)
	paid := b.waitStatus(p.ID, statusPaid)
	if paid.SettledAt == nil || paid.Reason != nil || paid.ReturnedAt != nil {
		t.Fatalf("paid: %+v", paid)
	}
	waitFor(t, "payment.paid", func() bool { return len(rc.of("payment.paid", p.ID)) == 1 })
	d := rc.of("payment.paid", p.ID)[0]
	if !strings.HasPrefix(d.ID, "evt_") || d.Data["reference"] != "po_k" {
		t.Fatalf("event: %+v", d)
	}
	if _, ok := d.Data["reason"]; ok {
		t.Fatalf("payment.paid has a reason: %s", d.Body)
	}
}

func TestAccountEnding0002Fails(t *testing.T) {
	rc := newReceiver(t)
	b := startBank(t, rc, fastFaults(), "")
	p := b.pay("k", acctFails)
	failed := b.waitStatus(p.ID, statusFailed)
	if failed.Reason == nil || *failed.Reason != reasonAccountClosed || failed.SettledAt == nil {
		t.Fatalf("failed: %+v", failed)
	}
	waitFor(t, "payment.failed", func() bool { return len(rc.of("payment.failed", p.ID)) == 1 })
	if d := rc.of("payment.failed", p.ID)[0]; d.Data["reason"] != reasonAccountClosed || d.Data["reference"] != "po_k" {
		t.Fatalf("event: %s", d.Body)
	}
	if len(rc.of("payment.paid", p.ID)) != 0 {
		t.Fatal("a failed payment was announced paid")
	}
}

func TestAccountEnding0003IsPaidThenReturned(t *testing.T) {
	rc := newReceiver(t)
	b := startBank(t, rc, fastFaults(), "")
	p := b.pay("k", acctReturned)
	ret := b.waitStatus(p.ID, statusReturned)
	if ret.Reason == nil || *ret.Reason != reasonAccountClosed || ret.SettledAt == nil || ret.ReturnedAt == nil ||
		ret.ReturnedAt.Sub(*ret.SettledAt) < 10*time.Millisecond {
		t.Fatalf("returned: %+v", ret)
	}
	waitFor(t, "paid and returned events", func() bool {
		return len(rc.of("payment.paid", p.ID)) == 1 && len(rc.of("payment.returned", p.ID)) == 1
	})
	if d := rc.of("payment.returned", p.ID)[0]; d.Data["reason"] != reasonAccountClosed {
		t.Fatalf("event: %s", d.Body)
	}
}

func TestFailRateAndReturnRate(t *testing.T) {
	rc := newReceiver(t)
	f := fastFaults()
	f.FailRate = 1
	b := startBank(t, rc, f, "")
	p := b.waitStatus(b.pay("f", acctPaid).ID, statusFailed)
	if *p.Reason != reasonRejected {
		t.Fatalf("fail-rate 1: %+v", p)
	}
	f.FailRate, f.ReturnRate = 0, 1
	b2 := startBank(t, rc, f, "")
	p = b2.waitStatus(b2.pay("r", acctPaid).ID, statusReturned)
	if *p.Reason != reasonReturned {
		t.Fatalf("return-rate 1: %+v", p)
	}
}

func TestAdminReturn(t *testing.T) {
	rc := newReceiver(t)
	b := startBank(t, rc, fastFaults(), "")
	p := b.waitStatus(b.pay("k", acctPaid).ID, statusPaid)
	var got Payment
	if code := b.do("POST", "/admin/payments/"+p.ID+"/return", "", `{"reason": "beneficiary_deceased"}`, &got); code != http.StatusOK ||
		got.Status != statusReturned || *got.Reason != "beneficiary_deceased" {
		t.Fatalf("return: %d %+v", code, got)
	}
	waitFor(t, "payment.returned", func() bool { return len(rc.of("payment.returned", p.ID)) == 1 })
	if code := b.do("POST", "/admin/payments/"+p.ID+"/return", "", "", nil); code != http.StatusConflict {
		t.Fatalf("returning twice: %d, want 409", code)
	}
	if code := b.do("POST", "/admin/payments/pay_nope/return", "", "", nil); code != http.StatusNotFound {
		t.Fatalf("unknown payment: %d, want 404", code)
	}
}

func TestResendKeepsIDAndBodyAndSignsAgain(t *testing.T) {
	rc := newReceiver(t)
	var tick atomic.Int64
	start := time.Now().Unix()
	sim, err := New(Config{CallbackURL: rc.url(), Secret: testSecret, Faults: fastFaults(),
		signTime: func() time.Time { return time.Unix(start+tick.Add(1), 0) }})
	if err != nil {
		t.Fatal(err)
	}
	b := &bank{Sim: sim, t: t, srv: httptest.NewServer(sim.Handler())}
	t.Cleanup(b.stop)
	p := b.pay("k", acctPaid)
	waitFor(t, "payment.paid", func() bool { return len(rc.of("payment.paid", p.ID)) == 1 })
	first := rc.of("payment.paid", p.ID)[0]
	if code := b.do("POST", "/admin/events/"+first.ID+"/resend", "", "", nil); code != http.StatusAccepted {
		t.Fatalf("resend: %d", code)
	}
	waitFor(t, "the resend", func() bool { return len(rc.of("payment.paid", p.ID)) == 2 })
	second := rc.of("payment.paid", p.ID)[1]
	if second.ID != first.ID || second.Body != first.Body {
		t.Fatalf("resend changed the event:\n%s\n%s", first.Body, second.Body)
	}
	if second.Signature == first.Signature {
		t.Fatalf("resend kept the signature %s", first.Signature)
	}
	if code := b.do("POST", "/admin/events/evt_nope/resend", "", "", nil); code != http.StatusNotFound {
		t.Fatalf("unknown event: %d, want 404", code)
	}
}

func TestSignatureIsFresh(t *testing.T) {
	rc := newReceiver(t)
	b := startBank(t, rc, fastFaults(), "")
	p := b.pay("k", acctPaid)
	waitFor(t, "payment.paid", func() bool { return len(rc.of("payment.paid", p.ID)) == 1 })
	sig := rc.of("payment.paid", p.ID)[0].Signature
	ts, _, _ := strings.Cut(strings.TrimPrefix(sig, "t="), ",")
	sec, _ := strconv.ParseInt(ts, 10, 64)
	if d := time.Since(time.Unix(sec, 0)); d < -time.Second || d > time.Minute {
		t.Fatalf("signature t=%s is %v away from now", ts, d)
	}
}

func TestCallbackRetriedUntil2xx(t *testing.T) {
	rc := newReceiver(t)
	rc.failNext.Store(2)
	b := startBank(t, rc, fastFaults(), "")
	p := b.pay("k", acctPaid)
	waitFor(t, "three deliveries", func() bool { return len(rc.of("payment.paid", p.ID)) == 3 })
	ds := rc.of("payment.paid", p.ID)
	for _, d := range ds {
		if d.ID != ds[0].ID || d.Body != ds[0].Body {
			t.Fatalf("a retry changed the event: %s vs %s", ds[0].Body, d.Body)
		}
	}
	var ev eventJSON
	waitFor(t, "delivered", func() bool { ev = b.events()[0]; return ev.Delivery == deliveryDelivered })
	if len(ev.Attempts) != 3 || ev.Attempts[0].Status != 500 || ev.Attempts[1].Status != 500 || ev.Attempts[2].Status != 200 ||
		ev.Attempts[2].Try != 3 {
		t.Fatalf("attempts: %+v", ev.Attempts)
	}
	if got := ev.Attempts[2].At.Sub(ev.Attempts[0].At); got < 3*time.Millisecond {
		t.Fatalf("no backoff: third attempt %v after the first", got)
	}
}

func TestCallbackGivesUpAfterTenAttempts(t *testing.T) {
	rc := newReceiver(t)
	rc.failNext.Store(1 << 30)
	f := fastFaults()
	f.CallbackRetryBase = 100 * time.Microsecond
	b := startBank(t, rc, f, "")
	b.pay("k", acctPaid)
	var ev eventJSON
	waitFor(t, "failed delivery", func() bool {
		evs := b.events()
		if len(evs) == 1 {
			ev = evs[0]
		}
		return ev.Delivery == deliveryFailed
	})
	if len(ev.Attempts) != maxAttempts || len(rc.deliveries()) != maxAttempts {
		t.Fatalf("%d attempts recorded, %d received; want %d", len(ev.Attempts), len(rc.deliveries()), maxAttempts)
	}
}

func TestDroppedCallbackIsNeverSent(t *testing.T) {
	rc := newReceiver(t)
	f := fastFaults()
	f.CallbackDropRate = 1
	b := startBank(t, rc, f, "")
	p := b.waitStatus(b.pay("k", acctPaid).ID, statusPaid) // the processor must ask
	evs := b.events()
	if len(evs) != 1 || evs[0].Delivery != deliveryDropped || len(evs[0].Attempts) != 0 {
		t.Fatalf("events: %+v", evs)
	}
	// A dropped event starts no delivery at all, so nothing can still be on its way.
	if got := rc.deliveries(); len(got) != 0 {
		t.Fatalf("a dropped event was sent: %+v", got)
	}
	// The admin can still send it.
	b.do("POST", "/admin/events/"+evs[0].ID+"/resend", "", "", nil)
	waitFor(t, "the resend", func() bool { return len(rc.of("payment.paid", p.ID)) == 1 })
}

func TestDuplicatedCallbacksArriveTwice(t *testing.T) {
	rc := newReceiver(t)
	f := fastFaults()
	f.CallbackDupRate = 1
	f.CallbackDelay = 5 * time.Millisecond
	b := startBank(t, rc, f, "")
	p := b.pay("k", acctReturned)
	waitFor(t, "each event twice", func() bool {
		return len(rc.of("payment.paid", p.ID)) == 2 && len(rc.of("payment.returned", p.ID)) == 2
	})
	for _, typ := range []string{"payment.paid", "payment.returned"} {
		ds := rc.of(typ, p.ID)
		if ds[0].ID != ds[1].ID || ds[0].Body != ds[1].Body {
			t.Fatalf("%s: two different events: %s / %s", typ, ds[0].Body, ds[1].Body)
		}
	}
}

// --- faults ---

func TestDownAndInjectedErrors(t *testing.T) {
	f := fastFaults()
	f.DownFor = time.Hour
	b := startBank(t, newReceiver(t), f, "")
	var e map[string]string
	if code := b.do("POST", "/payments", "k", instruction(acctPaid, "po_1", 1), &e); code != http.StatusServiceUnavailable ||
		e["error"] != "unavailable" {
		t.Fatalf("down: %d %v, want 503 unavailable", code, e)
	}
	if code := b.do("GET", "/payments?idempotency_key=k", "", "", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("down, lookup: %d, want 503", code)
	}
	// The admin answers during an outage, to end it.
	var got map[string]any
	if code := b.do("POST", "/admin/faults", "", `{"down_for": "0s", "error_rate": 1}`, &got); code != http.StatusOK ||
		got["down_for"] != "0s" || got["error_rate"] != 1.0 || got["settle_after"] != "5ms" {
		t.Fatalf("POST /admin/faults: %d %v", code, got)
	}
	if code := b.do("POST", "/payments", "k", instruction(acctPaid, "po_1", 1), &e); code != http.StatusServiceUnavailable ||
		e["error"] != "unavailable" {
		t.Fatalf("error-rate 1: %d %v, want 503 unavailable", code, e)
	}
	if st := b.statement(); len(st) != 0 {
		t.Fatalf("an unavailable bank recorded %+v", st)
	}
	b.do("POST", "/admin/faults", "", `{"error_rate": 0}`, nil)
	b.pay("k", acctPaid)
	// down_for from the admin counts from the change.
	b.do("POST", "/admin/faults", "", `{"down_for": "1h"}`, nil)
	if code := b.do("GET", "/payments", "", "", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("down again: %d, want 503", code)
	}
}

func TestFaultsAdmin(t *testing.T) {
	b := startBank(t, newReceiver(t), fastFaults(), "")
	var got map[string]any
	if code := b.do("GET", "/admin/faults", "", "", &got); code != http.StatusOK || len(got) != 12 || got["callback_retry_base"] != "1ms" {
		t.Fatalf("GET /admin/faults: %d %v", code, got)
	}
	for _, body := range []string{`{"error_rate": 2}`, `{"nope": 1}`, `{"latency": "soon"}`, `{"latency": 5}`,
		`{"settle_after": "-1s"}`, `[1]`, `{"error_rate": 0.5, "fail_rate": -1}`} {
		if code := b.do("POST", "/admin/faults", "", body, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, code)
		}
	}
	if f := b.knobs(); f != fastFaults() {
		t.Fatalf("a refused update changed the faults: %+v", f)
	}
	b.do("POST", "/admin/faults", "", `{"latency": "1ms", "callback_dup_rate": 0.25}`, nil)
	want := fastFaults()
	want.Latency, want.CallbackDupRate = time.Millisecond, 0.25
	if f := b.knobs(); f != want {
		t.Fatalf("faults %+v, want %+v", f, want)
	}
}

func TestLostAnswer(t *testing.T) {
	f := fastFaults()
	f.SettleAfter = time.Hour
	f.LostAnswerRate = 1
	b := startBank(t, newReceiver(t), f, "")
	req, _ := http.NewRequest("POST", b.srv.URL+"/payments", strings.NewReader(instruction(acctPaid, "po_lost", 10)))
	req.Header.Set("Idempotency-Key", "lost")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("lost answer: got %d, want no answer", resp.StatusCode)
	}
	var p Payment
	if code := b.do("GET", "/payments?idempotency_key=lost", "", "", &p); code != http.StatusOK || p.Reference != "po_lost" ||
		p.Status != statusPending {
		t.Fatalf("the payment of a lost answer: %d %+v", code, p)
	}
}

func TestLatency(t *testing.T) {
	f := fastFaults()
	f.Latency = 30 * time.Millisecond
	b := startBank(t, newReceiver(t), f, "")
	t0 := time.Now()
	b.statement()
	if d := time.Since(t0); d < 30*time.Millisecond {
		t.Fatalf("answered in %v, want at least the latency", d)
	}
}

// --- state file ---

func TestStateFileSurvivesRestart(t *testing.T) {
	rc := newReceiver(t)
	file := filepath.Join(t.TempDir(), "bank.json")
	f := fastFaults()
	f.SettleAfter = 50 * time.Millisecond
	b1 := startBank(t, rc, f, file)
	settled := b1.waitStatus(b1.pay("settled", acctPaid).ID, statusPaid)
	pending := b1.pay("pending", acctPaid)
	b1.stop()

	var onDisk state
	raw, err := os.ReadFile(file)
	if err != nil || json.Unmarshal(raw, &onDisk) != nil || len(onDisk.Payments) != 2 || onDisk.Payments[1].Status != statusPending {
		t.Fatalf("state file: %v %s", err, raw)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	// Restart after the payment fell due: it settles at start.
	waitFor(t, "the settlement time", func() bool { return time.Now().After(pending.CreatedAt.Add(f.SettleAfter)) })
	f.SettleAfter = time.Hour
	b2 := startBank(t, rc, f, file)
	st := b2.statement()
	if len(st) != 2 || st[0].ID != settled.ID || st[0].Status != statusPaid || st[1].ID != pending.ID {
		t.Fatalf("after restart: %+v", st)
	}
	b2.waitStatus(pending.ID, statusPaid)
	waitFor(t, "payment.paid after restart", func() bool { return len(rc.of("payment.paid", pending.ID)) == 1 })
	var again Payment
	if code := b2.do("POST", "/payments", "pending", instruction(acctPaid, "po_pending", 1250), &again); code != http.StatusOK ||
		again.ID != pending.ID {
		t.Fatalf("idempotency after restart: %d %+v", code, again)
	}
}

func TestPendingCallbackResumesAfterRestart(t *testing.T) {
	rc := newReceiver(t)
	rc.failNext.Store(1 << 30)
	file := filepath.Join(t.TempDir(), "bank.json")
	f := fastFaults()
	f.CallbackRetryBase = time.Hour // one attempt, then a long wait the stop interrupts
	b1 := startBank(t, rc, f, file)
	p := b1.pay("k", acctPaid)
	waitFor(t, "a failed attempt", func() bool { evs := b1.events(); return len(evs) == 1 && len(evs[0].Attempts) == 1 })
	b1.stop()
	rc.failNext.Store(0)
	b2 := startBank(t, rc, f, file)
	waitFor(t, "delivery after restart", func() bool {
		ds := rc.of("payment.paid", p.ID)
		return len(ds) == 2 && ds[1].Status == http.StatusOK
	})
	waitFor(t, "delivered", func() bool { return b2.events()[0].Delivery == deliveryDelivered })
}

func TestCorruptStateFileRefusesToStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bank.json")
	if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{CallbackURL: "http://127.0.0.1:1/", Secret: "s", StateFile: file, Faults: DefaultFaults()}); err == nil {
		t.Fatal("started on a corrupt state file")
	}
	if raw, _ := os.ReadFile(file); !bytes.Equal(raw, []byte("{not json")) {
		t.Fatal("the corrupt state file was overwritten")
	}
}

// --- credits ---

func TestAdminCredit(t *testing.T) {
	rc := newReceiver(t)
	b := startBank(t, rc, fastFaults(), "")
	var out map[string]string
	if code := b.do("POST", "/admin/credits", "", `{"account_number": "4000123", "amount_minor": 5000, "currency": "EUR", "reference": "invoice 7"}`,
		&out); code != http.StatusCreated || !strings.HasPrefix(out["event_id"], "evt_") {
		t.Fatalf("credit: %d %v", code, out)
	}
	waitFor(t, "credit.received", func() bool { return len(rc.of("credit.received", "")) == 1 })
	d := rc.of("credit.received", "")[0]
	if d.ID != out["event_id"] || d.Data["account_number"] != "4000123" || d.Data["amount_minor"] != 5000.0 ||
		d.Data["currency"] != "EUR" || d.Data["reference"] != "invoice 7" {
		t.Fatalf("event: %s", d.Body)
	}
	for _, body := range []string{`{"account_number": "", "amount_minor": 1, "currency": "EUR"}`,
		`{"account_number": "1", "amount_minor": 0, "currency": "EUR"}`, `{"account_number": "1", "amount_minor": 1, "currency": "eur"}`,
		`{"account_number": "1", "amount_minor": 1, "currency": "EUR", "extra": 1}`} {
		if code := b.do("POST", "/admin/credits", "", body, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, code)
		}
	}
}

// --- loopback only ---

func TestLoopbackOnly(t *testing.T) {
	for _, u := range []string{"http://10.1.2.3:8080/v1/bank/events", "http://192.0.2.1/x", "http://[2001:db8::1]/x",
		"http://0.0.0.0:8080/", "ftp://127.0.0.1/x", "127.0.0.1:8080", "http://nonexistent.invalid/x"} {
		if err := CheckCallbackURL(u); err == nil {
			t.Errorf("callback URL %s accepted", u)
		}
		if _, err := New(Config{CallbackURL: u, Secret: "s", Faults: DefaultFaults()}); err == nil {
			t.Errorf("New accepted callback URL %s", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080/v1/bank/events", "http://[::1]:8080/x", "http://127.1.2.3/x", "http://localhost:8080/v1/bank/events"} {
		if err := CheckCallbackURL(u); err != nil {
			t.Errorf("callback URL %s refused: %v", u, err)
		}
	}
	for _, a := range []string{"0.0.0.0:8090", ":8090", "10.0.0.1:8090", "[::]:8090", "example.com:8090", "8090"} {
		if _, err := LoopbackAddr(a); err == nil {
			t.Errorf("address %s accepted", a)
		}
		if ln, err := Listen(a); err == nil {
			ln.Close()
			t.Errorf("listened on %s", a)
		}
	}
	if a, err := LoopbackAddr("localhost:8090"); err != nil || a != "127.0.0.1:8090" {
		t.Errorf("localhost:8090: %q %v", a, err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := New(Config{CallbackURL: "http://127.0.0.1:1/", Faults: DefaultFaults()}); err == nil {
		t.Error("started without a secret")
	}
}

// The client refuses a non-loopback address even when the URL check is bypassed.
func TestClientDialsLoopbackOnly(t *testing.T) {
	resp, err := loopbackClient().Get("http://192.0.2.1:9/")
	if err == nil {
		resp.Body.Close()
		t.Fatal("the callback client reached a non-loopback address")
	}
	if !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("error: %v", err)
	}
}
