package payouts_test

// Small helpers the payout and payin tests share: a funded customer, its payouts through the
// API, and what the ledger and the bank each hold of a payout.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/testenv"
)

// Destinations the simulator decides by (docs/bank.md, "Lifecycle").
const (
	payee        = "000123456789" // paid
	closedPayee  = "000123450002" // failed: account_closed
	returnsPayee = "000123450003" // paid, then returned: account_closed
	bankCode     = "BANKUS33"
)

var usdSettlement = ledger.SettlementAccountID("USD")

// customer is an owner with one USD account, on e.
type customer struct {
	e       *testenv.Env
	ownerID string
	key     string
	acc     string
}

// newCustomer opens a USD account for a new owner on e and funds it with funded.
func newCustomer(t *testing.T, e *testenv.Env, funded int64) customer {
	t.Helper()
	c := customer{e: e}
	c.ownerID, c.key = e.Owner(t)
	c.acc = e.Account(t, c.key, "USD")
	if funded > 0 {
		e.Fund(t, c.acc, funded)
	}
	return c
}

func payoutBody(acc string, amount int64, accountNumber string) string {
	return fmt.Sprintf(`{"account_id":%q,"amount_minor":%d,"currency":"USD","destination":{"account_number":%q,"bank_code":%q},"description":"rent"}`,
		acc, amount, accountNumber, bankCode)
}

// pay sends POST /v1/payouts under idem.
func (c customer) pay(t *testing.T, idem string, amount int64, accountNumber string) testenv.Response {
	t.Helper()
	return c.e.Do(t, "POST", "/v1/payouts", c.key, idem, payoutBody(c.acc, amount, accountNumber))
}

// accepted sends a payout that must be answered 201 processing, and returns its id.
func (c customer) accepted(t *testing.T, idem string, amount int64, accountNumber string) string {
	t.Helper()
	r := c.pay(t, idem, amount, accountNumber)
	if r.Status != http.StatusCreated {
		t.Fatalf("payout %s: %d %s", idem, r.Status, r.Body)
	}
	if got := r.JSON(t)["status"]; got != "processing" {
		t.Fatalf("payout %s answered 201 %v, want processing: %s", idem, got, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

func (c customer) workflowID(idem string) string { return "payout/" + c.ownerID + "/" + idem }

// payout reads GET /v1/payouts/{id}.
func (c customer) payout(t *testing.T, id string) map[string]any {
	t.Helper()
	r := c.e.Do(t, "GET", "/v1/payouts/"+id, c.key, "", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET payout %s: %d %s", id, r.Status, r.Body)
	}
	return r.JSON(t)
}

// waitPayout waits until GET shows payout id in status, and returns what it shows.
func (c customer) waitPayout(t *testing.T, id, status string) map[string]any {
	t.Helper()
	var po map[string]any
	testenv.WaitFor(t, "payout "+id+" "+status, func() bool {
		po = c.payout(t, id)
		return po["status"] == status
	})
	return po
}

// balances reads the account through the API: balance_minor and available_minor.
func (c customer) balances(t *testing.T) (balance, available int64) {
	t.Helper()
	r := c.e.Do(t, "GET", "/v1/accounts/"+c.acc, c.key, "", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET account: %d %s", r.Status, r.Body)
	}
	var a struct {
		Balance   *int64 `json:"balance_minor"`
		Available *int64 `json:"available_minor"`
	}
	if err := json.Unmarshal(r.Body, &a); err != nil || a.Balance == nil || a.Available == nil {
		t.Fatalf("account without balance_minor or available_minor: %v %s", err, r.Body)
	}
	return *a.Balance, *a.Available
}

func (c customer) wantBalances(t *testing.T, balance, available int64) {
	t.Helper()
	if b, a := c.balances(t); b != balance || a != available {
		t.Fatalf("balance %d available %d, want %d and %d", b, a, balance, available)
	}
}

// accountNumber is the number the bank quotes for credits into the account.
func (c customer) accountNumber(t *testing.T) string {
	t.Helper()
	r := c.e.Do(t, "GET", "/v1/accounts/"+c.acc, c.key, "", "")
	n, _ := r.JSON(t)["account_number"].(string)
	if r.Status != http.StatusOK || n == "" {
		t.Fatalf("GET account: %d %s", r.Status, r.Body)
	}
	return n
}

// bankPayments is what the bank's statement holds for payout id.
func bankPayments(t *testing.T, e *testenv.Env, id string) []bank.Payment {
	t.Helper()
	var out []bank.Payment
	for _, p := range e.Bank.Statement(t) {
		if p.Reference == id {
			out = append(out, p)
		}
	}
	return out
}

// payoutState is what the ledger holds of a payout: its row, its hold, its postings.
type payoutState struct {
	Status        string
	BankPaymentID string
	Reason        string
	Hold          string // open, posted, released, or none
	HoldAmount    int64
	Postings      map[string]string           // kind -> status
	Entries       map[string]map[string]int64 // kind -> account -> amount
	EntryCount    int
}

func ledgerState(t *testing.T, e *testenv.Env, id string) payoutState {
	t.Helper()
	ctx := context.Background()
	s := payoutState{Hold: "none", Postings: map[string]string{}, Entries: map[string]map[string]int64{}}
	if err := e.DB.QueryRow(ctx, `SELECT status, COALESCE(bank_payment_id, ''), COALESCE(failure_reason, '') FROM payouts WHERE id = $1`, id).
		Scan(&s.Status, &s.BankPaymentID, &s.Reason); err != nil {
		t.Fatalf("payout %s: %v", id, err)
	}
	rows, err := e.DB.Query(ctx, `SELECT status, amount_minor FROM holds WHERE payout_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
		if err := rows.Scan(&s.Hold, &s.HoldAmount); err != nil {
			t.Fatal(err)
		}
	}
	if rows.Err() != nil || n > 1 {
		t.Fatalf("payout %s: %d holds (%v)", id, n, rows.Err())
	}
	rows, err = e.DB.Query(ctx, `SELECT t.kind, t.status, e.account_id, e.amount_minor FROM transfers t
		LEFT JOIN entries e ON e.transfer_id = t.id WHERE t.id IN ($1, $2)`, id, ledger.ReturnID(id))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, status string
		var account *string
		var amount *int64
		if err := rows.Scan(&kind, &status, &account, &amount); err != nil {
			t.Fatal(err)
		}
		s.Postings[kind] = status
		if account != nil {
			if s.Entries[kind] == nil {
				s.Entries[kind] = map[string]int64{}
			}
			s.Entries[kind][*account] += *amount
			s.EntryCount++
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return s
}

// settled checks that the ledger and the bank agree that payout id of c, of amount, ended in
// status (processing, paid, failed, returned): its hold, its postings and their entries, and
// exactly one bank payment (none for a payout refused before it was sent), the one the payout
// records, in the matching status. It returns the bank's payment.
func (c customer) settled(t *testing.T, id string, amount int64, status string) bank.Payment {
	t.Helper()
	s := ledgerState(t, c.e, id)
	if s.Status != status {
		t.Fatalf("payout %s is %s in the ledger, want %s", id, s.Status, status)
	}
	wantHold := map[string]string{"processing": "open", "paid": "posted", "returned": "posted", "failed": "released"}[status]
	if status == "failed" && s.Reason == ledger.ReasonInsufficientFunds {
		wantHold = "none" // refused at once: nothing was held
	}
	if s.Hold != wantHold || s.Hold != "none" && s.HoldAmount != amount {
		t.Fatalf("payout %s (%s): hold %s of %d, want %s of %d", id, status, s.Hold, s.HoldAmount, wantHold, amount)
	}
	out := map[string]int64{c.acc: -amount, usdSettlement: amount}
	back := map[string]int64{c.acc: amount, usdSettlement: -amount}
	want := map[string]map[string]int64{}
	switch status {
	case "paid":
		want["payout"] = out
	case "returned":
		want["payout"], want["return"] = out, back
	}
	if len(s.Postings) != len(want) || s.EntryCount != 2*len(want) || !sameEntries(s.Entries, want) {
		t.Fatalf("payout %s (%s): postings %v, %d entries %v; want %v", id, status, s.Postings, s.EntryCount, s.Entries, want)
	}
	for kind, st := range s.Postings {
		if st != "completed" {
			t.Fatalf("payout %s: %s posting %s", id, kind, st)
		}
	}
	ps := bankPayments(t, c.e, id)
	if s.Hold == "none" { // refused before anything was held: the bank never heard of it
		if len(ps) != 0 || s.BankPaymentID != "" {
			t.Fatalf("payout %s refused, but the bank holds %+v (recorded %q)", id, ps, s.BankPaymentID)
		}
		return bank.Payment{}
	}
	bankStatus := map[string]string{"processing": bank.Pending, "paid": bank.Paid, "failed": bank.Failed, "returned": bank.Returned}[status]
	if len(ps) != 1 {
		t.Fatalf("payout %s: the bank holds %d payments, want 1: %+v", id, len(ps), ps)
	}
	p := ps[0]
	if p.Status != bankStatus || p.ID != s.BankPaymentID || p.AmountMinor != amount || p.Currency != "USD" || p.IdempotencyKey != id {
		t.Fatalf("payout %s (%s, bank payment %q): the bank holds %+v", id, status, s.BankPaymentID, p)
	}
	return p
}

func sameEntries(got, want map[string]map[string]int64) bool {
	if len(got) != len(want) {
		return false
	}
	for kind, w := range want {
		g := got[kind]
		if len(g) != len(w) {
			return false
		}
		for acc, amount := range w {
			if g[acc] != amount {
				return false
			}
		}
	}
	return true
}

// bankEvent is an event as the bank keeps it, with its deliveries.
type bankEvent struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Delivery string          `json:"delivery"`
	Body     json.RawMessage `json:"body"`
	Attempts []struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	} `json:"attempts"`
}

// bankEvents is every event the bank made that match selects, with its deliveries.
func bankEvents(t *testing.T, e *testenv.Env, match func(bankEvent) bool) []bankEvent {
	t.Helper()
	var out []bankEvent
	for _, m := range e.Bank.Events(t) {
		raw, _ := json.Marshal(m)
		var ev bankEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func ofPayment(paymentID string) func(bankEvent) bool {
	return func(ev bankEvent) bool { return bytes.Contains(ev.Body, []byte(`"payment_id":"`+paymentID+`"`)) }
}

func eventID(id string) func(bankEvent) bool {
	return func(ev bankEvent) bool { return ev.ID == id }
}

// answered counts the attempts of ev the processor answered 200.
func (ev bankEvent) answered() int {
	n := 0
	for _, a := range ev.Attempts {
		if a.Status == http.StatusOK {
			n++
		}
	}
	return n
}

// deliver posts body to the API's bank callback endpoint, signed with secret at t (no header
// when secret is nil).
func deliver(t *testing.T, e *testenv.Env, secret []byte, at time.Time, body []byte) testenv.Response {
	t.Helper()
	req, err := http.NewRequest("POST", e.Server.URL+"/v1/bank/events", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != nil {
		req.Header.Set(bank.SignatureHeader, bank.Sign(secret, at, body))
	}
	return testenv.Send(t, req)
}

// recorded is what the processor recorded of bank event id: its outcome, or "" if nothing.
func recorded(t *testing.T, e *testenv.Env, id string) string {
	t.Helper()
	var outcome []string
	rows, err := e.DB.Query(context.Background(), `SELECT outcome FROM bank_events WHERE id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		outcome = append(outcome, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(outcome, ";")
}

// faults changes the bank's knobs for the rest of t, and puts the test defaults back when t ends.
func faults(t *testing.T, e *testenv.Env, knobs map[string]any) {
	t.Helper()
	e.Bank.SetFaults(t, knobs)
	t.Cleanup(func() {
		e.Bank.SetFaults(t, map[string]any{"latency": "0s", "error_rate": 0, "lost_answer_rate": 0, "settle_after": "50ms",
			"fail_rate": 0, "return_rate": 0, "return_after": "200ms", "callback_drop_rate": 0, "callback_dup_rate": 0,
			"callback_delay": "0s", "down_for": "0s"})
	})
}

// activityTypes lists the (regular) activities the latest run of workflowID scheduled, sorted.
func activityTypes(t *testing.T, e *testenv.Env, workflowID string) []string {
	t.Helper()
	var types []string
	for _, ev := range e.History(t, workflowID, "") {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			types = append(types, a.GetActivityType().GetName())
		}
	}
	slices.Sort(types)
	return types
}
