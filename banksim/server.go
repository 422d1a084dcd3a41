package banksim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
)

// Handler is the simulator's HTTP API: the rail (docs/bank.md, "The rail's API") and the admin
// endpoints.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", s.rail(s.postPayment))
	mux.HandleFunc("GET /payments/{id}", s.rail(s.getPayment))
	mux.HandleFunc("GET /payments", s.rail(s.listPayments))
	mux.HandleFunc("GET /admin/faults", s.getFaults)
	mux.HandleFunc("POST /admin/faults", s.postFaults)
	mux.HandleFunc("POST /admin/credits", s.postCredit)
	mux.HandleFunc("POST /admin/payments/{id}/return", s.postReturn)
	mux.HandleFunc("POST /admin/events/{id}/resend", s.postResend)
	mux.HandleFunc("GET /admin/events", s.listEvents)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { writeError(w, http.StatusNotFound, "not_found") })
	return mux
}

// rail wraps the rail's endpoints (not the admin ones, which must stay reachable to end an
// outage): --latency before every answer, then 503 while the bank is down.
func (s *Sim) rail(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sleep(r.Context(), s.knobs().Latency) {
			return // the client left
		}
		if s.down() {
			s.log.Info("unavailable", "method", r.Method, "path", r.URL.Path, "why", "down")
			writeError(w, http.StatusServiceUnavailable, "unavailable")
			return
		}
		h(w, r)
	}
}

// postPayment is POST /payments.
func (s *Sim) postPayment(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	log := s.log.With("idempotency_key", key)
	f := s.knobs()
	if s.dice.chance(f.ErrorRate) {
		log.Info("instruction", "outcome", "injected_error", "status", 503)
		writeError(w, http.StatusServiceUnavailable, "unavailable")
		return
	}
	if !validKey(key) {
		log.Info("instruction", "outcome", "invalid_idempotency_key", "status", 400)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_idempotency_key",
			"reason": "the Idempotency-Key header is required: 1 to 255 visible ASCII characters"})
		return
	}
	var in Instruction
	if err := decodeStrict(r, &in); err != nil {
		log.Info("instruction", "outcome", "invalid_instruction", "status", 422, "reason", err.Error())
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "invalid_instruction", "reason": err.Error()})
		return
	}
	p, created, err := s.instruct(key, in)
	var invalid invalidError
	switch {
	case errors.Is(err, errKeyReused):
		log.Info("instruction", "outcome", "idempotency_key_reused", "status", 409)
		writeError(w, http.StatusConflict, "idempotency_key_reused")
		return
	case errors.As(err, &invalid):
		log.Info("instruction", "outcome", "invalid_instruction", "status", 422, "reason", invalid.Error())
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "invalid_instruction", "reason": invalid.Error()})
		return
	case err != nil:
		log.Error("instruction", "outcome", "state_not_written", "status", 503, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable")
		return
	}
	log = log.With("payment_id", p.ID, "payment_status", p.Status, "created", created)
	// The payment is durable by now; a lost answer leaves the client not knowing it.
	if s.dice.chance(f.LostAnswerRate) {
		log.Info("instruction", "outcome", "lost_answer")
		dropConnection(w)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	log.Info("instruction", "outcome", "accepted", "status", status)
	writeJSON(w, status, p)
}

// dropConnection closes the connection without writing an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// A connection that cannot be hijacked (HTTP/2): net/http aborts the stream instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// getPayment is GET /payments/{id}.
func (s *Sim) getPayment(w http.ResponseWriter, r *http.Request) {
	p, ok := s.payment(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "not_found")
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// listPayments is GET /payments (the statement) and GET /payments?idempotency_key=K.
func (s *Sim) listPayments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("idempotency_key") {
		writeJSON(w, http.StatusOK, map[string]any{"data": s.statement()})
		return
	}
	p, ok := s.paymentByKey(q.Get("idempotency_key"))
	if !ok {
		writeError(w, http.StatusNotFound, "not_found")
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// getFaults is GET /admin/faults.
func (s *Sim) getFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.knobs())
}

// postFaults is POST /admin/faults: a partial update, all of it or nothing.
func (s *Sim) postFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	s.fmu.Lock() // one update at a time: two partial updates must not undo each other
	defer s.fmu.Unlock()
	f, err := s.faults.patch(body)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	s.faults = f
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields)
	if _, ok := fields["down_for"]; ok {
		s.downUntil = time.Now().Add(f.DownFor) // down_for counts from the change
	}
	s.log.Info("faults changed", "faults", f)
	writeJSON(w, http.StatusOK, f)
}

// postCredit is POST /admin/credits.
func (s *Sim) postCredit(w http.ResponseWriter, r *http.Request) {
	var in struct {
		AccountNumber string `json:"account_number"`
		AmountMinor   int64  `json:"amount_minor"`
		Currency      string `json:"currency"`
		Reference     string `json:"reference"`
	}
	if err := decodeStrict(r, &in); err != nil {
		badRequest(w, err.Error())
		return
	}
	id, err := s.credit(Credit{AccountNumber: in.AccountNumber, AmountMinor: in.AmountMinor, Currency: in.Currency, Reference: in.Reference})
	var invalid invalidError
	switch {
	case errors.As(err, &invalid):
		badRequest(w, invalid.Error())
	case err != nil:
		s.log.Error("credit", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable")
	default:
		writeJSON(w, http.StatusCreated, map[string]string{"event_id": id})
	}
}

// postReturn is POST /admin/payments/{id}/return {"reason": "…"} (the body is optional).
func (s *Sim) postReturn(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Reason string `json:"reason"`
	}
	if err := decodeStrict(r, &in); err != nil && !errors.Is(err, errEmptyBody) {
		badRequest(w, err.Error())
		return
	}
	p, err := s.returnPayment(r.PathValue("id"), in.Reason)
	switch {
	case errors.Is(err, errNotFound):
		writeError(w, http.StatusNotFound, "not_found")
	case errors.Is(err, errNotPaid):
		writeJSON(w, http.StatusConflict, map[string]any{"error": "payment_not_paid", "payment": p})
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "unavailable")
	default:
		writeJSON(w, http.StatusOK, p)
	}
}

// postResend is POST /admin/events/{id}/resend.
func (s *Sim) postResend(w http.ResponseWriter, r *http.Request) {
	ev, err := s.resend(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found")
		return
	}
	writeJSON(w, http.StatusAccepted, eventView(&ev))
}

// listEvents is GET /admin/events: every event, oldest first, with its delivery attempts.
func (s *Sim) listEvents(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := make([]any, 0, len(s.st.Events))
	for _, ev := range s.st.Events {
		out = append(out, eventView(ev))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"data": out})
}

// eventView shows an event with its body as JSON (the state file keeps the exact bytes).
// Called under s.mu, or on a copy.
func eventView(ev *Event) any {
	return struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		CreatedAt time.Time       `json:"created_at"`
		Delivery  string          `json:"delivery"`
		Attempts  []Attempt       `json:"attempts"`
		Body      json.RawMessage `json:"body"`
	}{ev.ID, ev.Type, ev.CreatedAt, ev.Delivery, append([]Attempt{}, ev.Attempts...), json.RawMessage(ev.Body)}
}

var errEmptyBody = errors.New("the body is empty")

// decodeStrict reads one JSON object of at most 64 KiB; unknown fields and trailing data are
// errors.
func decodeStrict(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err != nil {
		return err
	}
	if len(body) > 64<<10 {
		return errors.New("body larger than 64 KiB")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return errEmptyBody
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"error": code})
}

func badRequest(w http.ResponseWriter, reason string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request", "reason": reason})
}
