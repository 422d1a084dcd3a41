package payouts_test

// The bank's input read once and strictly (docs/contract.md §6): an event id is one event,
// whatever is sent under it again; a signed body that is ambiguous or no event is answered 200,
// kept for operators, and has no effect; text PostgreSQL cannot store never makes a verified
// event fail or a credit be lost.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/testenv"
)

// credit is a credit.received body of amount for account number, under event id; number and
// reference are written as given, JSON escapes included.
func credit(id, number string, amount int64, reference string) string {
	return fmt.Sprintf(`{"id":%q,"type":"credit.received","created_at":"2026-01-01T00:00:00Z","data":{"account_number":"%s","amount_minor":%d,"currency":"USD","reference":"%s"}}`,
		id, number, amount, reference)
}

// newEventID is an event id no other test (nor run of this one) sends.
func newEventID(what string) string { return fmt.Sprintf("evt_%s_%d", what, time.Now().UnixNano()) }

// noRun fails t if the workflow id exists: nothing was handed on under it.
func noRun(t *testing.T, workflowID string) {
	t.Helper()
	_, err := env.Temporal.DescribeWorkflowExecution(context.Background(), workflowID, "")
	var notFound *serviceerror.NotFound
	if !errors.As(err, &notFound) {
		t.Fatalf("a run %s exists (%v): the event was acted on", workflowID, err)
	}
}

// conflicts is the distinct bodies kept as conflicting with event id, and their copies in all.
func conflicts(t *testing.T, id string) (bodies, copies int) {
	t.Helper()
	if err := env.DB.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(copies), 0) FROM bank_event_conflicts WHERE event_id = $1`,
		id).Scan(&bodies, &copies); err != nil {
		t.Fatal(err)
	}
	return bodies, copies
}

// An id first sent as payment.failed for a payout no one has (unmatched), then as a credit of
// 5,555 for a real account: the second body is not the event. It is answered 200 "conflict",
// credits nothing and is kept for operators; the first, sent again, is still the event. The
// other way round, a credit first and then another body under its id: credited once.
func TestAnEventIDIsOneEvent(t *testing.T) {
	c := newCustomer(t, env, 0)
	id := newEventID("one")
	failed := fmt.Sprintf(`{"id":%q,"type":"payment.failed","created_at":"2026-01-01T00:00:00Z","data":{"payment_id":"pay_nobody","reference":"po_nobody","reason":"account_closed"}}`, id)
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(failed))); o != "unmatched" {
		t.Fatalf("the first body: %q", o)
	}
	money := credit(id, c.accountNumber(t), 5_555, "not the event")
	for copies := 1; copies <= 2; copies++ {
		if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(money))); !strings.HasPrefix(o, "conflict") {
			t.Fatalf("another body under the id: %q", o)
		}
		if b, n := conflicts(t, id); b != 1 || n != copies {
			t.Fatalf("conflicts kept: %d bodies, %d copies; want 1 body, %d copies", b, n, copies)
		}
	}
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(failed))); o != "unmatched" {
		t.Fatalf("the first body again: %q", o)
	}
	noRun(t, "payin/"+id)
	if got := recorded(t, env, id); got != "unmatched" {
		t.Fatalf("recorded %q", got)
	}
	var body []byte
	if err := env.DB.QueryRow(context.Background(), `SELECT body FROM bank_events WHERE id = $1`, id).Scan(&body); err != nil || string(body) != failed {
		t.Fatalf("the event kept: %s %v", body, err)
	}
	if b, n := conflicts(t, id); b != 1 || n != 2 {
		t.Fatalf("conflicts kept: %d bodies, %d copies", b, n)
	}

	first := newEventID("credit_first")
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(credit(first, c.accountNumber(t), 300, "the event")))); o != "payin started" {
		t.Fatalf("a credit: %q", o)
	}
	if p := payinOf(t, first); p.Status != "credited" || p.Amount != 300 {
		t.Fatalf("payin %+v", p)
	}
	for _, other := range []string{credit(first, c.accountNumber(t), 3_000, "the event"),
		strings.Replace(failed, id, first, 1)} {
		if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(other))); !strings.HasPrefix(o, "conflict") {
			t.Fatalf("another body under a credit's id: %q", o)
		}
	}
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(credit(first, c.accountNumber(t), 300, "the event")))); o != "duplicate" {
		t.Fatalf("the credit again: %q", o)
	}
	time.Sleep(testenv.SettlePeriod)
	payinOf(t, first)
	c.wantBalances(t, 300, 300)
	if b, n := conflicts(t, first); b != 2 || n != 2 {
		t.Fatalf("conflicts kept: %d bodies, %d copies", b, n)
	}
	env.Reconcile(t)
}

// A signed credit that can be read more than one way (amount_minor given twice, or in another
// case, which encoding/json read as 7,000) is answered 200 "malformed", credits nothing, and is
// kept under its body's hash with the reason. An unambiguous credit with a member the processor
// does not know is credited.
func TestAmbiguousCreditsAreKeptNotCredited(t *testing.T) {
	c := newCustomer(t, env, 0)
	number := c.accountNumber(t)
	for _, b := range []struct{ name, body, reason string }{
		{"a case variant", `"amount_minor":7,"currency":"USD","AMOUNT_MINOR":7000`, `"data.AMOUNT_MINOR" is "amount_minor" in another case`},
		{"given twice", `"amount_minor":7,"currency":"USD","amount_minor":7000`, `"data.amount_minor" given more than once`},
		{"given twice, escaped", `"amount_minor":7,"currency":"USD","amount\u005fminor":7000`, `"data.amount_minor" given more than once`},
	} {
		id := newEventID("ambiguous")
		body := fmt.Sprintf(`{"id":%q,"type":"credit.received","created_at":"2026-01-01T00:00:00Z","data":{"account_number":%q,%s}}`, id, number, b.body)
		for range 2 {
			if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(body))); !strings.HasPrefix(o, "malformed: ") || !strings.Contains(o, b.reason) {
				t.Fatalf("%s: outcome %q", b.name, o)
			}
		}
		noRun(t, "payin/"+id)
		if got := recorded(t, env, ledger.MalformedBankEventID([]byte(body))); !strings.HasPrefix(got, "malformed: ") || !strings.Contains(got, b.reason) {
			t.Fatalf("%s: kept as %q", b.name, got)
		}
		if n := env.Count(t, `SELECT count(*) FROM bank_events WHERE body = $1`, []byte(body)); n != 1 {
			t.Fatalf("%s: kept %d times", b.name, n)
		}
		if got := recorded(t, env, id); got != "" {
			t.Fatalf("%s: recorded as event %s: %q", b.name, id, got)
		}
	}
	time.Sleep(testenv.SettlePeriod)
	if n := env.Count(t, `SELECT count(*) FROM payins WHERE account_id = $1`, c.acc); n != 0 {
		t.Fatalf("%d payins from ambiguous credits", n)
	}
	c.wantBalances(t, 0, 0)

	id := newEventID("extra_member")
	body := fmt.Sprintf(`{"id":%q,"type":"credit.received","created_at":"2026-01-01T00:00:00Z","data":{"account_number":%q,"amount_minor":7,"currency":"USD","value_date":"2026-01-01"},"livemode":true}`, id, number)
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(body))); o != "payin started" {
		t.Fatalf("a credit with members the processor does not know: %q", o)
	}
	if p := payinOf(t, id); p.Status != "credited" || p.Amount != 7 {
		t.Fatalf("payin %+v", p)
	}
	c.wantBalances(t, 7, 7)
	env.Reconcile(t)
}

// A signed credit for a real account with a NUL in its reference is credited, the reference
// stored with the NUL escaped; one with a NUL in its account number matches no account and is
// recorded unmatched. Both runs complete. A payment event with a NUL in its reference matches
// no payout; one with a NUL in its id is no event (kept, no effect): each is answered 200.
func TestNULInABankEventIsAnswered2xxAndStored(t *testing.T) {
	c := newCustomer(t, env, 0)
	number := c.accountNumber(t)
	ref := newEventID("nul_reference")
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(credit(ref, number, 400, `invoice\u00007`)))); o != "payin started" {
		t.Fatalf("a NUL in a credit's reference: %q", o)
	}
	if p := payinOf(t, ref); p.Status != "credited" || p.Amount != 400 || p.Reference != `invoice\u00007` || *p.AccountID != c.acc {
		t.Fatalf("payin %+v", p)
	}
	acct := newEventID("nul_account_number")
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(credit(acct, number+`\u0000`, 500, "x")))); o != "payin started" {
		t.Fatalf("a NUL in a credit's account number: %q", o)
	}
	if p := payinOf(t, acct); p.Status != "unmatched" || p.Amount != 500 || p.AccountID != nil {
		t.Fatalf("payin %+v", p)
	}
	if n := env.Count(t, `SELECT count(*) FROM payins WHERE bank_event_id = $1 AND account_number = $2`, acct, number+`\u0000`); n != 1 {
		t.Fatalf("the unmatched payin's account number is not kept escaped")
	}
	for _, id := range []string{ref, acct} {
		if st := env.Settled(t, "payin/"+id); st.String() != "Completed" {
			t.Fatalf("the payin's run %s: %v", id, st)
		}
	}
	c.wantBalances(t, 400, 400)

	nulRef := newEventID("nul_payment_reference")
	paid := fmt.Sprintf(`{"id":%q,"type":"payment.paid","created_at":"2026-01-01T00:00:00Z","data":{"payment_id":"pay_x","reference":"po_x\u0000"}}`, nulRef)
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(paid))); o != "unmatched" {
		t.Fatalf("a NUL in a payment event's reference: %q", o)
	}
	nulID := fmt.Sprintf(`{"id":"evt_nul\u0000%d","type":"payment.paid","created_at":"2026-01-01T00:00:00Z","data":{"payment_id":"pay_x","reference":"po_x"}}`, time.Now().UnixNano())
	if o := outcomeOf(t, deliver(t, env, secret, time.Now(), []byte(nulID))); !strings.HasPrefix(o, "malformed: id holds a control") {
		t.Fatalf("a NUL in a payment event's id: %q", o)
	}
	if got := recorded(t, env, ledger.MalformedBankEventID([]byte(nulID))); !strings.HasPrefix(got, "malformed: id") {
		t.Fatalf("kept as %q", got)
	}
	c.wantBalances(t, 400, 400)
	env.Reconcile(t)
}
