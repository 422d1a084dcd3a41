package banksim

import (
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// What an instruction or an admin action can run into.
var (
	errKeyReused = errors.New("idempotency_key_reused")
	errNotFound  = errors.New("not_found")
	errNotPaid   = errors.New("payment_not_paid")
)

// invalidError is an instruction the bank refuses, and why.
type invalidError string

func (e invalidError) Error() string { return string(e) }

// instruct makes the payment of an instruction, or finds the one its key already made. The
// lookup and the insert happen under one lock, so concurrent duplicates make one payment. The
// payment is in the state file before the answer is given.
func (s *Sim) instruct(key string, in Instruction) (p Payment, created bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.ix.byKey[key]; ok {
		if r.instruction() != in {
			return Payment{}, false, errKeyReused
		}
		return r.Payment, false, nil
	}
	if why := in.validate(); why != "" {
		return Payment{}, false, invalidError(why)
	}
	t := now()
	r := &record{
		Payment: Payment{ID: newID("pay_"), Status: statusPending, AmountMinor: in.AmountMinor, Currency: in.Currency,
			Destination: in.Destination, Reference: in.Reference, IdempotencyKey: key, CreatedAt: t},
		SettleAt: t.Add(s.knobs().SettleAfter),
	}
	s.st.Payments = append(s.st.Payments, r)
	s.ix.byID[r.ID], s.ix.byKey[key] = r, r
	if err := save(s.cfg.StateFile, &s.st); err != nil {
		// Not durable, so not made: the client is told 503 and may send it again.
		s.st.Payments = s.st.Payments[:len(s.st.Payments)-1]
		delete(s.ix.byID, r.ID)
		delete(s.ix.byKey, key)
		return Payment{}, false, err
	}
	s.scheduleLocked("settle/"+r.ID, r.SettleAt, func() { s.settle(r.ID) })
	return r.Payment, true, nil
}

// settle decides a pending payment's outcome: the destination's magic suffixes first (tests
// rely on them), then --fail-rate; a paid payment may be bound for a return (--return-rate).
func (s *Sim) settle(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.timers, "settle/"+id)
	r := s.ix.byID[id]
	if s.closed || r == nil || r.Status != statusPending {
		return
	}
	f := s.knobs()
	t := now()
	acct := r.Destination.AccountNumber
	r.SettledAt = &t
	switch {
	case strings.HasSuffix(acct, "0002"):
		s.failLocked(r, reasonAccountClosed)
	case strings.HasSuffix(acct, "0003"):
		s.payLocked(r, t, reasonAccountClosed)
	case s.dice.chance(f.FailRate):
		s.failLocked(r, reasonRejected)
	case s.dice.chance(f.ReturnRate):
		s.payLocked(r, t, reasonReturned)
	default:
		s.payLocked(r, t, "")
	}
}

func (s *Sim) failLocked(r *record, reason string) {
	r.Status, r.Reason = statusFailed, &reason
	s.changedLocked(r, "payment.failed", reason)
}

// payLocked pays r; a returnReason schedules its return after --return-after.
func (s *Sim) payLocked(r *record, t time.Time, returnReason string) {
	r.Status = statusPaid
	if returnReason != "" {
		at := t.Add(s.knobs().ReturnAfter)
		r.ReturnAt, r.ReturnReason = &at, returnReason
		s.scheduleLocked("return/"+r.ID, at, func() { s.returnPayment(r.ID, "") })
	}
	s.changedLocked(r, "payment.paid", "")
}

// returnPayment returns a paid payment now, with reason (or the one decided at settlement).
func (s *Sim) returnPayment(id, reason string) (Payment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.timers["return/"+id]; t != nil {
		t.Stop() // an admin return comes first: the scheduled one has nothing left to do
		delete(s.timers, "return/"+id)
	}
	r := s.ix.byID[id]
	switch {
	case s.closed:
		return Payment{}, errors.New("stopping")
	case r == nil:
		return Payment{}, errNotFound
	case r.Status != statusPaid:
		return r.Payment, errNotPaid
	}
	if reason == "" {
		reason = r.ReturnReason
	}
	if reason == "" {
		reason = reasonReturned
	}
	t := now()
	r.Status, r.Reason, r.ReturnedAt = statusReturned, &reason, &t
	s.changedLocked(r, "payment.returned", reason)
	return r.Payment, nil
}

// changedLocked announces a change of r: the event, the state file, then the callbacks. A
// state file that cannot be written is logged: the change stands in memory and the next write
// carries it.
func (s *Sim) changedLocked(r *record, typ, reason string) {
	ev, copies := s.newEventLocked(typ, paymentData{PaymentID: r.ID, Reference: r.Reference, Reason: reason})
	if err := save(s.cfg.StateFile, &s.st); err != nil {
		s.log.Error("state file", "err", err)
	}
	attrs := []any{"payment_id", r.ID, "reference", r.Reference, "event_id", ev.ID}
	if reason != "" {
		attrs = append(attrs, "reason", reason)
	}
	s.log.Info("payment "+r.Status, attrs...)
	s.announceLocked(ev, copies)
}

// credit records money arriving for an account and announces it.
func (s *Sim) credit(c Credit) (string, error) {
	if why := c.validate(); why != "" {
		return "", invalidError(why)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.ID, c.CreatedAt = newID("crd_"), now()
	ev, copies := s.newEventLocked("credit.received",
		creditData{AccountNumber: c.AccountNumber, AmountMinor: c.AmountMinor, Currency: c.Currency, Reference: c.Reference})
	c.EventID = ev.ID
	s.st.Credits = append(s.st.Credits, &c)
	if err := save(s.cfg.StateFile, &s.st); err != nil {
		s.st.Credits = s.st.Credits[:len(s.st.Credits)-1]
		s.st.Events = s.st.Events[:len(s.st.Events)-1]
		delete(s.ix.eventOf, ev.ID)
		return "", err
	}
	s.log.Info("credit received", "credit_id", c.ID, "account_number", c.AccountNumber, "amount_minor", c.AmountMinor,
		"currency", c.Currency, "event_id", ev.ID)
	s.announceLocked(ev, copies)
	return ev.ID, nil
}

// newEventLocked builds an event and draws its fate: dropped (0 copies), sent once or twice.
func (s *Sim) newEventLocked(typ string, data any) (*Event, int) {
	ev := &Event{ID: newID("evt_"), Type: typ, CreatedAt: now(), Delivery: deliveryPending, Attempts: []Attempt{}}
	body, _ := json.Marshal(struct {
		ID        string    `json:"id"`
		Type      string    `json:"type"`
		CreatedAt time.Time `json:"created_at"`
		Data      any       `json:"data"`
	}{ev.ID, ev.Type, ev.CreatedAt, data})
	ev.Body = string(body)
	f := s.knobs()
	copies := 1
	switch {
	case s.dice.chance(f.CallbackDropRate):
		ev.Delivery, copies = deliveryDropped, 0
	case s.dice.chance(f.CallbackDupRate):
		copies = 2
	}
	s.st.Events = append(s.st.Events, ev)
	s.ix.eventOf[ev.ID] = ev
	return ev, copies
}

// scheduleLocked runs f at the time at (now, when it is past). Close stops the timers; f must
// check s.closed as a timer may fire while Close runs.
func (s *Sim) scheduleLocked(key string, at time.Time, f func()) {
	if s.closed {
		return
	}
	s.timers[key] = time.AfterFunc(time.Until(at), f)
}

// resume picks up after a start: settlements and returns (due ones fire at once), and the
// events whose delivery a stop interrupted.
func (s *Sim) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.st.Payments {
		switch {
		case r.Status == statusPending:
			s.scheduleLocked("settle/"+r.ID, r.SettleAt, func() { s.settle(r.ID) })
		case r.Status == statusPaid && r.ReturnAt != nil:
			s.scheduleLocked("return/"+r.ID, *r.ReturnAt, func() { _, _ = s.returnPayment(r.ID, "") })
		}
	}
	for _, ev := range s.st.Events {
		if ev.Delivery == deliveryPending {
			s.announceLocked(ev, 1)
		}
	}
}

// payment, paymentByKey and statement read the state.
func (s *Sim) payment(id string) (Payment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.ix.byID[id]
	if !ok {
		return Payment{}, false
	}
	return r.Payment, true
}

func (s *Sim) paymentByKey(key string) (Payment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.ix.byKey[key]
	if !ok {
		return Payment{}, false
	}
	return r.Payment, true
}

func (s *Sim) statement() []Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Payment, 0, len(s.st.Payments))
	for _, r := range s.st.Payments {
		out = append(out, r.Payment)
	}
	return out
}
