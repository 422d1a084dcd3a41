package payouts_test

// The bank's callbacks at POST /v1/bank/events (docs/contract.md §6): sent twice, sent again,
// out of order, not signed right; and the credits (payins) they announce.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/testenv"
)

var secret = []byte(testenv.BankSecret)

func ofReference(payoutID string) func(bankEvent) bool {
	return func(ev bankEvent) bool { return bytes.Contains(ev.Body, []byte(`"reference":"`+payoutID+`"`)) }
}

func outcomeOf(t *testing.T, r testenv.Response) string {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("a verified event answered %d %s, want 200", r.Status, r.Body)
	}
	o, _ := r.JSON(t)["outcome"].(string)
	return o
}

// Every callback sent twice, and the paid one sent once more later: each is answered 200, the
// processor records each event once, and the payout is paid once.
func TestDuplicateCallbacksTakeEffectOnce(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	faults(t, env, map[string]any{"callback_dup_rate": 1})
	id := c.accepted(t, "dup", 300, payee)
	c.waitPayout(t, id, "paid")
	p := c.settled(t, id, 300, "paid")
	var ev bankEvent
	testenv.WaitFor(t, "both copies of the paid callback to be answered 200", func() bool {
		evs := bankEvents(t, env, ofPayment(p.ID))
		if len(evs) != 1 {
			t.Fatalf("the bank's events of %s: %+v", p.ID, evs)
		}
		ev = evs[0]
		return ev.answered() == 2
	})
	env.Bank.Resend(t, ev.ID)
	testenv.WaitFor(t, "the resent callback to be answered 200", func() bool {
		return bankEvents(t, env, eventID(ev.ID))[0].answered() == 3
	})
	for _, a := range bankEvents(t, env, eventID(ev.ID))[0].Attempts {
		if a.Status != http.StatusOK {
			t.Fatalf("an attempt answered %d %s", a.Status, a.Error)
		}
	}
	if n := env.Count(t, `SELECT count(*) FROM bank_events WHERE id = $1`, ev.ID); n != 1 {
		t.Fatalf("event %s recorded %d times", ev.ID, n)
	}
	if got := recorded(t, env, ev.ID); got != "delivered" {
		t.Fatalf("event %s: outcome %q", ev.ID, got)
	}
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	env.Reconcile(t)
}

// The bank pays then returns a payment (0003), but its callbacks are lost, its answers to the
// run's questions too, and the return's callback arrives first, then the paid one, then the
// return again: the payout is paid and returned once, each callback answered 200.
func TestReturnCallbackBeforePaid(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	faults(t, env, map[string]any{"callback_drop_rate": 1, "settle_after": "2s"})
	id := c.accepted(t, "early-return", 300, returnsPayee)
	testenv.WaitFor(t, "the bank to take the instruction", func() bool { return len(bankPayments(t, env, id)) == 1 })
	// From now on the run's questions go unanswered: only callbacks can tell it.
	env.Bank.SetFaults(t, map[string]any{"down_for": "1h"})
	if s := ledgerState(t, env, id); s.Status != "processing" {
		t.Fatalf("the payout is %s before the bank settled it", s.Status)
	}
	var paid, returned bankEvent
	testenv.WaitFor(t, "the bank to pay and return the payment", func() bool {
		for _, ev := range bankEvents(t, env, ofReference(id)) {
			switch ev.Type {
			case bank.PaymentPaid:
				paid = ev
			case bank.PaymentReturned:
				returned = ev
			}
		}
		return paid.ID != "" && returned.ID != ""
	})
	if paid.Delivery != "dropped" || returned.Delivery != "dropped" {
		t.Fatalf("callbacks sent: %+v %+v", paid, returned)
	}
	if s := ledgerState(t, env, id); s.Status != "processing" {
		t.Fatalf("the payout is %s before any callback", s.Status)
	}

	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), returned.Body)); o != "delivered" {
		t.Fatalf("the return, first: %q", o)
	}
	c.waitPayout(t, id, "returned")
	for _, ev := range []bankEvent{paid, returned} {
		outcomeOf(t, deliver(t, env, secret, time.Now(), ev.Body)) // delivered to the run, or late: either way 200
	}
	env.Bank.SetFaults(t, map[string]any{"down_for": "0s"})
	po := c.payout(t, id)
	if po["failure_reason"] != "account_closed" || po["paid_at"] == nil || po["returned_at"] == nil {
		t.Fatalf("GET: %v", po)
	}
	c.settled(t, id, 300, "returned")
	c.wantBalances(t, 1_000, 1_000)
	for _, ev := range []bankEvent{paid, returned} {
		if n := env.Count(t, `SELECT count(*) FROM bank_events WHERE id = $1`, ev.ID); n != 1 {
			t.Fatalf("event %s recorded %d times", ev.ID, n)
		}
	}
	env.Reconcile(t)
}

// A callback whose signature does not verify is answered 401 and changes nothing: not
// recorded, not credited, not applied to a payout. The same bytes signed right are taken.
func TestBadSignaturesChangeNothing(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	id := c.accepted(t, "signed", 300, payee)
	c.waitPayout(t, id, "paid")
	p := c.settled(t, id, 300, "paid")
	now := time.Now()
	created := now.UTC().Format(time.RFC3339)
	credit := []byte(fmt.Sprintf(`{"id":"evt_forged_credit_%d","type":"credit.received","created_at":%q,"data":{"account_number":%q,"amount_minor":500,"currency":"USD","reference":"forged"}}`,
		now.UnixNano(), created, c.accountNumber(t)))
	ret := []byte(fmt.Sprintf(`{"id":"evt_forged_return_%d","type":"payment.returned","created_at":%q,"data":{"payment_id":%q,"reference":%q,"reason":"forged"}}`,
		now.UnixNano(), created, p.ID, id))
	for _, body := range [][]byte{credit, ret} {
		valid := bank.Sign(secret, now, body)
		_, v1, _ := strings.Cut(valid, ",")
		for _, bad := range []struct {
			name, header string
			body         []byte
		}{
			{"wrong secret", bank.Sign([]byte("not-"+testenv.BankSecret), now, body), body},
			{"tampered body", valid, bytes.Replace(body, []byte(`"forged"`), []byte(`"forgeD"`), 1)},
			{"signed 6 minutes ago", bank.Sign(secret, now.Add(-6*time.Minute), body), body},
			{"signed 6 minutes ahead", bank.Sign(secret, now.Add(6*time.Minute), body), body},
			{"another t for the same v1", fmt.Sprintf("t=%d,%s", now.Unix()+1, v1), body},
			{"no v1", fmt.Sprintf("t=%d", now.Unix()), body},
			{"no t", v1, body},
			{"empty header", "", body},
			{"no header", "-", body},
		} {
			req := env.Request(t, "POST", "/v1/bank/events", "", string(bad.body))
			if bad.header != "-" {
				req.Header.Set(bank.SignatureHeader, bad.header)
			}
			r := testenv.Send(t, req)
			if r.Status != http.StatusUnauthorized || testenv.ProblemType(t, r) != "unauthorized" ||
				!strings.Contains(r.JSON(t)["detail"].(string), "Bank-Signature") {
				t.Fatalf("%s: %d %s", bad.name, r.Status, r.Body)
			}
		}
	}
	if n := env.Count(t, `SELECT count(*) FROM bank_events WHERE id LIKE 'evt_forged_%'`); n != 0 {
		t.Fatalf("%d refused events recorded", n)
	}
	if n := env.Count(t, `SELECT count(*) FROM payins WHERE reference = 'forged'`); n != 0 {
		t.Fatalf("%d payins from refused events", n)
	}
	c.wantBalances(t, 700, 700)
	c.settled(t, id, 300, "paid")

	// The credit's very bytes, signed with the bank's secret, are taken, once.
	r := deliver(t, env, secret, time.Now(), credit)
	if o := outcomeOf(t, r); o != "payin started" {
		t.Fatalf("the credit signed right: %q", o)
	}
	testenv.WaitFor(t, "the credit", func() bool { b, _ := c.balances(t); return b == 1_200 })
	c.wantBalances(t, 1_200, 1_200)
	env.Reconcile(t)
}

// payin is a payins row.
type payin struct {
	ID, Status, Currency, Reference string
	AccountID, TransferID           *string
	Amount                          int64
}

func payinOf(t *testing.T, eventID string) payin {
	t.Helper()
	var p payin
	testenv.WaitFor(t, "the payin of "+eventID, func() bool {
		return env.DB.QueryRow(context.Background(), `SELECT id, status, currency, reference, account_id, transfer_id, amount_minor
			FROM payins WHERE bank_event_id = $1`, eventID).Scan(&p.ID, &p.Status, &p.Currency, &p.Reference, &p.AccountID, &p.TransferID, &p.Amount) == nil
	})
	if n := env.Count(t, `SELECT count(*) FROM payins WHERE bank_event_id = $1`, eventID); n != 1 {
		t.Fatalf("%d payins for event %s", n, eventID)
	}
	return p
}

// Money arrives at the bank for an account number: credited once, from the settlement account,
// however often the bank says so; for a number no account has, or in another currency than the
// account's, recorded unmatched and credited to no one.
func TestPayins(t *testing.T) {
	c := newCustomer(t, env, 0)
	number := c.accountNumber(t)
	usd, eur := env.Balance(t, usdSettlement), env.Balance(t, "acc_settlement_eur")

	ev := env.Bank.Credit(t, number, 500, "USD", "invoice 7")
	p := payinOf(t, ev)
	if p.Status != "credited" || p.AccountID == nil || *p.AccountID != c.acc || p.Amount != 500 || p.Currency != "USD" ||
		p.Reference != "invoice 7" || p.TransferID == nil || *p.TransferID != p.ID {
		t.Fatalf("payin: %+v", p)
	}
	if st := env.Settled(t, "payin/"+ev); st.String() != "Completed" {
		t.Fatalf("the payin's run: %v", st)
	}
	credited := func() {
		t.Helper()
		c.wantBalances(t, 500, 500)
		if d := env.Balance(t, usdSettlement) - usd; d != -500 {
			t.Fatalf("the USD settlement account moved by %d, want -500", d)
		}
		if n := env.Count(t, `SELECT count(*) FROM transfers WHERE to_account_id = $1 AND kind = 'payin' AND status = 'completed'`, c.acc); n != 1 {
			t.Fatalf("%d payin postings, want 1", n)
		}
		if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1 AND
			((account_id = $2 AND amount_minor = 500) OR (account_id = $3 AND amount_minor = -500))`, p.ID, c.acc, usdSettlement); n != 2 ||
			env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1`, p.ID) != 2 {
			t.Fatalf("the payin's posting has not its two entries")
		}
	}
	credited()
	testenv.WaitFor(t, "the credit's callback to be answered", func() bool { return bankEvents(t, env, eventID(ev))[0].answered() == 1 })

	env.Bank.Resend(t, ev)
	testenv.WaitFor(t, "the resent callback to be answered", func() bool { return bankEvents(t, env, eventID(ev))[0].answered() == 2 })
	// The record keeps what the event first did; the resend's own answer said "duplicate".
	if got := recorded(t, env, ev); got != "payin started" {
		t.Fatalf("the resent credit: outcome %q", got)
	}
	payinOf(t, ev)
	credited()

	nobody := env.Bank.Credit(t, "300000000001", 700, "USD", "nobody's")
	if p := payinOf(t, nobody); p.Status != "unmatched" || p.AccountID != nil || p.TransferID != nil || p.Amount != 700 {
		t.Fatalf("payin for an unknown number: %+v", p)
	}
	euros := env.Bank.Credit(t, number, 900, "EUR", "wrong currency")
	if p := payinOf(t, euros); p.Status != "unmatched" || p.AccountID != nil || p.TransferID != nil || p.Currency != "EUR" {
		t.Fatalf("payin in another currency: %+v", p)
	}
	for _, id := range []string{nobody, euros} {
		if st := env.Settled(t, "payin/"+id); st.String() != "Completed" {
			t.Fatalf("the payin's run: %v", st)
		}
	}
	credited()
	if d := env.Balance(t, "acc_settlement_eur") - eur; d != 0 {
		t.Fatalf("the EUR settlement account moved by %d", d)
	}
	env.Reconcile(t)
}

// Signed callbacks the processor has nothing to do with are answered 200, so that the bank stops
// sending them: a payment no payout names (recorded, "unmatched"), a type it does not act on
// (recorded, ignored), a body that is no event (recorded as malformed). Each changes nothing else.
func TestSignedCallbacksThatMatchNothing(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	n := time.Now().UnixNano()
	unknown := fmt.Sprintf(`{"id":"evt_nobody_%d","type":"payment.paid","created_at":"2026-01-01T00:00:00Z","data":{"payment_id":"pay_x","reference":"po_nobody"}}`, n)
	pending := fmt.Sprintf(`{"id":"evt_pending_%d","type":"payment.pending","created_at":"2026-01-01T00:00:00Z","data":{"payment_id":"pay_x","reference":"po_nobody"}}`, n)
	zero := fmt.Sprintf(`{"id":"evt_zero_%d","type":"credit.received","created_at":"2026-01-01T00:00:00Z","data":{"account_number":%q,"amount_minor":0,"currency":"USD"}}`, n, c.accountNumber(t))
	for body, want := range map[string]string{unknown: "unmatched", pending: "ignored", zero: "rejected"} {
		for range 2 {
			r := deliver(t, env, secret, time.Now(), []byte(body))
			if o := outcomeOf(t, r); !strings.HasPrefix(o, want) {
				t.Fatalf("%s: outcome %q, want %s", body, o, want)
			}
		}
	}
	if got := recorded(t, env, fmt.Sprintf("evt_nobody_%d", n)); got != "unmatched" {
		t.Fatalf("recorded %q", got)
	}
	if got := recorded(t, env, fmt.Sprintf("evt_pending_%d", n)); !strings.HasPrefix(got, "ignored") {
		t.Fatalf("recorded %q", got)
	}
	if made := env.Count(t, `SELECT count(*) FROM payins WHERE bank_event_id = $1`, fmt.Sprintf("evt_zero_%d", n)); made != 0 {
		t.Fatalf("a credit of 0 made %d payins", made)
	}
	// A body that is no event is kept once, under its hash, for operators, and acts on nothing.
	for _, body := range []string{`not json`, fmt.Sprintf(`{"id":"","type":"payment.paid","n":%d}`, n)} {
		for range 2 {
			if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(body))); !strings.HasPrefix(o, "malformed: ") {
				t.Fatalf("%s: outcome %q", body, o)
			}
		}
		if got := recorded(t, env, ledger.MalformedBankEventID([]byte(body))); !strings.HasPrefix(got, "malformed: ") {
			t.Fatalf("%s: kept as %q", body, got)
		}
	}
	c.wantBalances(t, 1_000, 1_000)
	env.Reconcile(t)
}
