package payouts_test

// A payout's life through the API (docs/contract.md §6): held at once, paid, failed, returned;
// refused for want of available money; asked for fifty times at once. Each test checks the
// answers, the ledger (balances, available_minor, entries, holds, statuses) and the bank's own
// statement.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/testenv"
)

// Paid: 201 processing with the money held (available drops, balance does not), then the bank
// pays and the hold is posted to the settlement account; the same request replays the first
// answer byte for byte.
func TestPayoutPaid(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	settlementBefore := env.Balance(t, usdSettlement)

	// The settlement account's row held: the payout's money is held and sent, but its posting
	// waits, so the state between the two can be read.
	release := env.Hold(t, usdSettlement)
	r := c.pay(t, "happy", 300, payee)
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("payout: %d %v %s", r.Status, r.Header, r.Body)
	}
	po := r.JSON(t)
	id, _ := po["id"].(string)
	if po["status"] != "processing" || po["bank_payment_id"] != nil || po["paid_at"] != nil || po["failed_at"] != nil ||
		po["returned_at"] != nil || po["failure_reason"] != nil || po["account_id"] != c.acc || po["amount_minor"] != 300.0 ||
		po["currency"] != "USD" || po["description"] != "rent" || po["workflow_id"] != c.workflowID("happy") ||
		r.Header.Get("Location") != "/v1/payouts/"+id {
		t.Fatalf("first answer: %v %s", r.Header, r.Body)
	}
	if d, _ := po["destination"].(map[string]any); d["account_number"] != payee || d["bank_code"] != bankCode {
		t.Fatalf("destination: %s", r.Body)
	}
	c.wantBalances(t, 1_000, 700)
	if s := ledgerState(t, env, id); s.Status != "processing" || s.Hold != "open" || s.HoldAmount != 300 || len(s.Postings) != 0 {
		t.Fatalf("held: %+v", s)
	}
	testenv.WaitFor(t, "the paid posting to wait for the settlement account", func() bool { return env.Waiting(t) > 0 })
	release()

	got := c.waitPayout(t, id, "paid")
	p := c.settled(t, id, 300, "paid")
	if got["paid_at"] == nil || got["bank_payment_id"] != p.ID || got["failed_at"] != nil || got["returned_at"] != nil {
		t.Fatalf("GET after paid: %v", got)
	}
	c.wantBalances(t, 700, 700)
	if d := env.Balance(t, usdSettlement) - settlementBefore; d != 300 {
		t.Fatalf("the settlement account moved by %d, want 300", d)
	}

	again := c.pay(t, "happy", 300, payee)
	testenv.SameAnswer(t, r, again)
	c.wantBalances(t, 700, 700)
	c.settled(t, id, 300, "paid")
	env.Reconcile(t)
}

// Refused: the account's balance would cover it, but most of it is held by a payout in flight:
// 422 insufficient-funds naming the payout, final and replayed; nothing held, nothing sent.
// A transfer cannot spend the held money either.
func TestPayoutInsufficientAvailableFunds(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	other := env.Account(t, c.key, "USD")
	// The first payout stays held, not posted, while the bank takes its time. (Holding the
	// settlement account's lock instead would leave its posting waiting with the customer's
	// account locked, and the transfer below waiting behind it.)
	faults(t, env, map[string]any{"settle_after": "5s"})
	first := c.accepted(t, "most", 800, payee)
	c.wantBalances(t, 1_000, 200)

	r := c.pay(t, "more", 500, payee)
	if r.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, r) != "insufficient-funds" {
		t.Fatalf("second payout: %d %s", r.Status, r.Body)
	}
	id, _ := r.JSON(t)["payout_id"].(string)
	if id == "" || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("refusal without payout_id, or said replayed: %v %s", r.Header, r.Body)
	}
	tr := env.Do(t, "POST", "/v1/transfers", c.key, "spend-held", testenv.TransferBody(c.acc, other, 500))
	if tr.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, tr) != "insufficient-funds" {
		t.Fatalf("a transfer of held money: %d %s", tr.Status, tr.Body)
	}
	c.wantBalances(t, 1_000, 200)

	testenv.SameAnswer(t, r, c.pay(t, "more", 500, payee))
	po := c.payout(t, id)
	if po["status"] != "failed" || po["failure_reason"] != "insufficient funds" || po["failed_at"] == nil ||
		po["bank_payment_id"] != nil || po["paid_at"] != nil || po["workflow_id"] != c.workflowID("more") {
		t.Fatalf("GET refused payout: %v", po)
	}
	c.waitPayout(t, first, "paid")
	c.settled(t, first, 800, "paid")
	c.settled(t, id, 500, "failed")
	if s := ledgerState(t, env, id); s.Hold != "none" {
		t.Fatalf("refused payout has a hold: %+v", s)
	}
	if env.Settled(t, c.workflowID("more")).String() != "Completed" {
		t.Fatal("the refused payout's run did not complete")
	}
	c.wantBalances(t, 200, 200)
	testenv.SameAnswer(t, r, c.pay(t, "more", 500, payee))
	env.Reconcile(t)
}

// Failed at the bank (destination account closed): the hold is released, nothing posted.
func TestPayoutFailedByTheBank(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	id := c.accepted(t, "closed", 400, closedPayee)
	po := c.waitPayout(t, id, "failed")
	if po["failure_reason"] != "account_closed" || po["failed_at"] == nil || po["paid_at"] != nil || po["bank_payment_id"] == nil {
		t.Fatalf("GET failed payout: %v", po)
	}
	p := c.settled(t, id, 400, "failed")
	if p.Reason == nil || *p.Reason != "account_closed" {
		t.Fatalf("bank payment: %+v", p)
	}
	c.wantBalances(t, 1_000, 1_000)
	env.Reconcile(t)
}

// Returned after it was paid, by the beneficiary's bank (0003) or on the bank's say-so: the
// money comes back as a posting of its own, the payout's posting and its posted hold stay.
func TestPayoutReturned(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	settlementBefore := env.Balance(t, usdSettlement)
	closed := c.accepted(t, "returns", 300, returnsPayee)
	po := c.waitPayout(t, closed, "returned")
	if po["returned_at"] == nil || po["paid_at"] == nil || po["failure_reason"] != "account_closed" || po["bank_payment_id"] == nil {
		t.Fatalf("GET returned payout: %v", po)
	}
	c.settled(t, closed, 300, "returned")
	c.wantBalances(t, 1_000, 1_000)

	paid := c.accepted(t, "returned-later", 200, payee)
	c.waitPayout(t, paid, "paid")
	p := c.settled(t, paid, 200, "paid")
	c.wantBalances(t, 800, 800)
	env.Bank.Return(t, p.ID, "beneficiary_deceased")
	po = c.waitPayout(t, paid, "returned")
	if po["failure_reason"] != "beneficiary_deceased" || po["returned_at"] == nil || po["paid_at"] == nil {
		t.Fatalf("GET returned payout: %v", po)
	}
	c.settled(t, paid, 200, "returned")
	c.wantBalances(t, 1_000, 1_000)
	if d := env.Balance(t, usdSettlement) - settlementBefore; d != 0 {
		t.Fatalf("the settlement account moved by %d, want 0 after both returns", d)
	}
	// The account shows each movement as its own entry: deposit, two payouts, two returns.
	r := env.Do(t, "GET", "/v1/accounts/"+c.acc+"/entries", c.key, "", "")
	var entries struct {
		Data []struct {
			TransferID string `json:"transfer_id"`
			Amount     int64  `json:"amount_minor"`
			After      int64  `json:"balance_after_minor"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &entries); err != nil || r.Status != http.StatusOK || len(entries.Data) != 5 {
		t.Fatalf("entries: %d %s", r.Status, r.Body)
	}
	got := map[string]int64{}
	for _, e := range entries.Data {
		got[e.TransferID] += e.Amount
	}
	if got[closed] != -300 || got[ledger.ReturnID(closed)] != 300 || got[paid] != -200 || got[ledger.ReturnID(paid)] != 200 ||
		entries.Data[0].TransferID != ledger.ReturnID(paid) || entries.Data[0].After != 1_000 {
		t.Fatalf("entries: %s", r.Body)
	}
	env.Reconcile(t)
}

// Fifty identical requests at once: one payout, one run, one hold, one bank payment; one
// answer is the first, the other 49 replay it byte for byte. So too through an API without a
// worker in its process (`payments api`), whose first answer comes by the run's Update, not by
// reading the ledger.
func TestConcurrentDuplicatePayouts(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			testConcurrentDuplicatePayouts(t, env.With(t, testenv.Options{Split: split}), split)
		})
	}
}

func testConcurrentDuplicatePayouts(t *testing.T, e *testenv.Env, split bool) {
	c := newCustomer(t, e, 1_000)
	const n = 50
	answers := make([]testenv.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = c.pay(t, "fifty", 250, payee)
		}()
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i, a := range answers {
		if a.Status != http.StatusCreated || string(a.Body) != string(answers[0].Body) ||
			a.Header.Get("Location") != answers[0].Header.Get("Location") || a.Header.Get("Content-Type") != answers[0].Header.Get("Content-Type") {
			t.Fatalf("answer %d: %d %v %s, answer 0: %d %s", i, a.Status, a.Header, a.Body, answers[0].Status, answers[0].Body)
		}
		if a.Header.Get("Idempotent-Replayed") != "true" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d answers say they are not replays, want 1", fresh)
	}
	id := answers[0].JSON(t)["id"].(string)
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 250, "paid")
	c.wantBalances(t, 750, 750)
	if k := env.Count(t, `SELECT count(*) FROM payouts WHERE account_id = $1`, c.acc); k != 1 {
		t.Fatalf("%d payouts, want 1", k)
	}
	if k := env.Count(t, `SELECT count(*) FROM holds WHERE account_id = $1`, c.acc); k != 1 {
		t.Fatalf("%d holds, want 1", k)
	}
	var runs int
	testenv.WaitFor(t, "the run to be visible", func() bool {
		resp, err := env.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowId = '" + c.workflowID("fifty") + "'"})
		if err != nil {
			t.Fatal(err)
		}
		runs = len(resp.GetExecutions())
		return runs > 0
	})
	if runs != 1 {
		t.Fatalf("%d runs under %s, want 1", runs, c.workflowID("fifty"))
	}
	if asked := env.AnswerUpdates(t, c.workflowID("fifty")); (asked > 0) != split {
		t.Fatalf("the run answered %d AnswerUpdates; an API without a worker asks by one, an API with one never", asked)
	}
	env.Reconcile(t)
}

// A paid payout's run waits for a return for the return window (5s in the tests' Env), then
// ends: asked once at the window's end, as workflows.Payout says. It must not stay open.
func TestPaidPayoutRunEndsAfterItsReturnWindow(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	id := c.accepted(t, "window", 100, payee)
	c.waitPayout(t, id, "paid")
	// The window is 5s; one status query at its end takes milliseconds. 12s is plenty.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	if err := env.Temporal.GetWorkflow(ctx, c.workflowID("window"), "").Get(ctx, nil); err != nil {
		d, _ := env.Temporal.DescribeWorkflowExecution(context.Background(), c.workflowID("window"), "")
		t.Fatalf("the run of a paid payout is still %v 12s after it was paid, with a 5s return window: %v (activities: %v)",
			d.GetWorkflowExecutionInfo().GetStatus(), err, activityTypes(t, env, c.workflowID("window")))
	}
	p := c.settled(t, id, 100, "paid")
	c.wantBalances(t, 900, 900)
	env.Reconcile(t)

	// The beneficiary's bank returns it after the window: the money is back with the bank, so
	// it is credited back all the same, once, though no run waits for it any more.
	env.Bank.Return(t, p.ID, "account_closed")
	c.waitPayout(t, id, "returned")
	c.settled(t, id, 100, "returned")
	c.wantBalances(t, 1_000, 1_000)
	// The callback's outcome is noted just after the credit commits: wait for it.
	testenv.WaitFor(t, "the late return's outcome to be recorded", func() bool {
		evs := bankEvents(t, env, ofPayment(p.ID))
		returned := slices.IndexFunc(evs, func(ev bankEvent) bool { return ev.Type == bank.PaymentReturned })
		return returned >= 0 && recorded(t, env, evs[returned].ID) == "returned after the return window"
	})
	c.settled(t, id, 100, "returned")
	env.Reconcile(t)
}

// A late return of a paid payout whose key has been used again since: the workflow ID's latest
// run is the later payout's, which refuses an event about another payout. The return is still
// credited, once, as for a payout whose run has closed.
func TestLateReturnWhileTheKeysNextUseRuns(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	first := c.accepted(t, "again", 100, payee)
	c.waitPayout(t, first, "paid")
	wf := c.workflowID("again")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	if err := env.Temporal.GetWorkflow(ctx, wf, "").Get(ctx, nil); err != nil {
		t.Fatalf("the first payout's run did not end after its return window: %v", err)
	}
	p := c.settled(t, first, 100, "paid")
	// Its key's record expires and is cleaned up: the key's next use is a payout of its own.
	if tag, err := env.DB.Exec(ctx, `DELETE FROM idempotency_records WHERE owner_id = $1 AND route = $2 AND key = 'again'`,
		c.ownerID, idempotency.RoutePayouts); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expiring the key: %v %v", tag, err)
	}
	second := c.accepted(t, "again", 200, payee)
	if second == first {
		t.Fatalf("the key's next use answered the first payout %s", first)
	}
	desc, err := env.Temporal.DescribeWorkflowExecution(ctx, wf, "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the second payout's run should be open: %v %v", desc.GetWorkflowExecutionInfo().GetStatus(), err)
	}

	env.Bank.Return(t, p.ID, "account_closed")
	c.waitPayout(t, first, "returned")
	c.settled(t, first, 100, "returned")
	evs := bankEvents(t, env, ofPayment(p.ID))
	returned := slices.IndexFunc(evs, func(ev bankEvent) bool { return ev.Type == bank.PaymentReturned })
	if returned < 0 || recorded(t, env, evs[returned].ID) != "returned after the return window" {
		t.Fatalf("the late return's events: %+v", evs)
	}
	c.waitPayout(t, second, "paid")
	c.settled(t, second, 200, "paid")
	c.wantBalances(t, 800, 800)
	env.Reconcile(t)
}

// Requests refused at the door (docs/contract.md §3 and §6: 400, 404, 422 as for transfers):
// nothing claimed, held or sent, and the key stays free for a corrected request. Another
// owner sees neither the account nor the payout.
func TestPayoutRequestsRefusedAtTheDoor(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	stranger := newCustomer(t, env, 1_000)
	euros := env.Account(t, c.key, "EUR")
	for _, bad := range []struct {
		name, body, problem string
		status              int
	}{
		{"zero amount", payoutBody(c.acc, 0, payee), "invalid-request", http.StatusBadRequest},
		{"short account number", payoutBody(c.acc, 100, "12345"), "invalid-request", http.StatusBadRequest},
		{"lower-case bank code", strings.Replace(payoutBody(c.acc, 100, payee), bankCode, "bankus33", 1), "invalid-request", http.StatusBadRequest},
		{"no destination", `{"account_id":"` + c.acc + `","amount_minor":100,"currency":"USD"}`, "invalid-request", http.StatusBadRequest},
		{"unknown field", strings.Replace(payoutBody(c.acc, 100, payee), `"rent"`, `"rent","memo":"x"`, 1), "invalid-request", http.StatusBadRequest},
		{"another owner's account", payoutBody(stranger.acc, 100, payee), "not-found", http.StatusNotFound},
		{"unknown account", payoutBody("acc_nope", 100, payee), "not-found", http.StatusNotFound},
		{"currency mismatch", payoutBody(euros, 100, payee), "currency-mismatch", http.StatusUnprocessableEntity},
	} {
		r := env.Do(t, "POST", "/v1/payouts", c.key, "door", bad.body)
		if r.Status != bad.status || testenv.ProblemType(t, r) != bad.problem {
			t.Fatalf("%s: %d %s", bad.name, r.Status, r.Body)
		}
	}
	if n := env.Count(t, `SELECT count(*) FROM payouts WHERE workflow_id = $1`, c.workflowID("door")); n != 0 {
		t.Fatalf("%d payouts claimed by refused requests", n)
	}
	c.wantBalances(t, 1_000, 1_000)
	stranger.wantBalances(t, 1_000, 1_000)

	id := c.accepted(t, "door", 100, payee) // the key was never taken
	r := env.Do(t, "POST", "/v1/payouts", c.key, "door", payoutBody(c.acc, 101, payee))
	if r.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, r) != "idempotency-key-reused" {
		t.Fatalf("the key with another body: %d %s", r.Status, r.Body)
	}
	if g := env.Do(t, "GET", "/v1/payouts/"+id, stranger.key, "", ""); g.Status != http.StatusNotFound || testenv.ProblemType(t, g) != "not-found" {
		t.Fatalf("another owner's GET: %d %s", g.Status, g.Body)
	}
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 100, "paid")
	c.wantBalances(t, 900, 900)
	env.Reconcile(t)
}

// A destination the API takes but the bank refuses for good (at the simulator, an account
// number ending in 0004 does not exist): the payout fails at once, its hold released, and the
// bank holds no payment.
func TestPayoutRefusedByTheBank(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	r := env.Do(t, "POST", "/v1/payouts", c.key, "bic", payoutBody(c.acc, 100, "000123450004"))
	if r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	po := c.waitPayout(t, id, "failed")
	if po["failure_reason"] != "refused by the bank" || po["bank_payment_id"] != nil || po["failed_at"] == nil {
		t.Fatalf("GET: %v", po)
	}
	if s := ledgerState(t, env, id); s.Hold != "released" || len(s.Postings) != 0 || len(bankPayments(t, env, id)) != 0 {
		t.Fatalf("refused by the bank: %+v, bank %+v", s, bankPayments(t, env, id))
	}
	c.wantBalances(t, 1_000, 1_000)
	env.Reconcile(t)
}

// Payouts and transfers race for one account's money: each is taken in full or refused for
// insufficient funds, exactly as many as the money covers are taken, and available_minor never
// goes below zero (invariant 7).
func TestConcurrentPayoutsAndTransfersNeverOverdraw(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	other := env.Account(t, c.key, "USD")
	const payouts, transfers = 16, 8
	answers := make([]testenv.Response, payouts+transfers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if i < payouts {
				answers[i] = c.pay(t, fmt.Sprintf("race-%d", i), 100, payee)
			} else {
				answers[i] = env.Do(t, "POST", "/v1/transfers", c.key, fmt.Sprintf("race-%d", i), testenv.TransferBody(c.acc, other, 100))
			}
		}()
	}
	close(start)
	wg.Wait()
	taken, paidOut := 0, []string{}
	for i, a := range answers {
		switch {
		case a.Status == http.StatusCreated:
			taken++
			if i < payouts {
				paidOut = append(paidOut, a.JSON(t)["id"].(string))
			}
		case a.Status == http.StatusUnprocessableEntity && testenv.ProblemType(t, a) == "insufficient-funds":
			if i < payouts {
				c.settled(t, a.JSON(t)["payout_id"].(string), 100, "failed")
			}
		default:
			t.Fatalf("request %d: %d %s", i, a.Status, a.Body)
		}
	}
	if taken != 10 {
		t.Fatalf("%d of %d requests of 100 were taken from 1,000", taken, len(answers))
	}
	for _, id := range paidOut {
		c.waitPayout(t, id, "paid")
		c.settled(t, id, 100, "paid")
	}
	c.wantBalances(t, 0, 0)
	if b := env.Balance(t, other); b != int64(100*(taken-len(paidOut))) {
		t.Fatalf("the other account holds %d after %d transfers", b, taken-len(paidOut))
	}
	env.Reconcile(t)
}

// The money cannot be held within PAYMENTS_SYNC_WAIT (the account's row is locked): the first
// request is answered 202 with the payout claimed, nothing held yet; a duplicate meanwhile is
// told 409 idempotency-key-in-use; once held, the stored first answer (201 processing) is what
// the key replays, and the payout is paid once.
func TestPayoutNotHeldWithinTheWait(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	quick := env.With(t, testenv.Options{SyncWait: 300 * time.Millisecond})
	release := env.Hold(t, c.acc)
	r := quick.Do(t, "POST", "/v1/payouts", c.key, "late-hold", payoutBody(c.acc, 300, payee))
	if r.Status != http.StatusAccepted {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	id, _ := r.JSON(t)["id"].(string)
	if r.JSON(t)["status"] != "processing" || r.Header.Get("Location") != "/v1/payouts/"+id {
		t.Fatalf("202: %v %s", r.Header, r.Body)
	}
	if s := ledgerState(t, env, id); s.Hold != "none" {
		t.Fatalf("held already: %+v", s)
	}
	dup := quick.Do(t, "POST", "/v1/payouts", c.key, "late-hold", payoutBody(c.acc, 300, payee))
	if dup.Status != http.StatusConflict || testenv.ProblemType(t, dup) != "idempotency-key-in-use" || dup.Header.Get("Retry-After") == "" ||
		dup.JSON(t)["payout_id"] != id {
		t.Fatalf("duplicate while not held: %d %v %s; want 409 naming payout %s", dup.Status, dup.Header, dup.Body, id)
	}
	release()
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 300, "paid")
	again := c.pay(t, "late-hold", 300, payee)
	if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || again.JSON(t)["id"] != id ||
		again.JSON(t)["status"] != "processing" {
		t.Fatalf("replay: %d %v %s", again.Status, again.Header, again.Body)
	}
	c.wantBalances(t, 700, 700)
	env.Reconcile(t)
}

// A payout's metadata is the client's: shown as given through its life (the first answer, GET
// once paid, the payout.paid event), part of the fingerprint, in the run's memo only.
func TestPayoutMetadata(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	body := func(meta string) string {
		return strings.TrimSuffix(payoutBody(c.acc, 100, payee), "}") + `,"metadata":` + meta + `}`
	}
	const meta = `{"invoice":"INV-7","payee":"J. Example"}`
	r := env.Do(t, "POST", "/v1/payouts", c.key, "meta", body(meta))
	if r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"metadata":`+meta) {
		t.Fatalf("payout: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	if other := env.Do(t, "POST", "/v1/payouts", c.key, "meta", body(`{"invoice":"INV-8","payee":"J. Example"}`)); testenv.ProblemType(t, other) != "idempotency-key-reused" {
		t.Fatalf("same key, other metadata: %d %s", other.Status, other.Body)
	}
	c.waitPayout(t, id, "paid")
	if got := env.Do(t, "GET", "/v1/payouts/"+id, c.key, "", ""); !strings.Contains(string(got.Body), `"metadata":`+meta) {
		t.Fatalf("GET: %s", got.Body)
	}
	testenv.WaitFor(t, "the payout.paid event", func() bool {
		ev := env.Do(t, "GET", "/v1/events?type=payout.paid&limit=200", c.key, "", "")
		return strings.Contains(string(ev.Body), `"metadata":`+meta)
	})
	desc, err := env.Temporal.DescribeWorkflowExecution(context.Background(), c.workflowID("meta"), "")
	if err != nil {
		t.Fatal(err)
	}
	m := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()["metadata"]
	var shown map[string]string
	if err := testenv.Converter.FromPayload(m, &shown); err != nil || !strings.Contains(fmt.Sprint(shown), "INV-7") || strings.Contains(m.String(), "INV-7") {
		t.Fatalf("memo %v, read with the keys %v (%v): want the metadata sealed", m, shown, err)
	}
	for name, p := range desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields() {
		if strings.Contains(string(p.GetData()), "INV-7") {
			t.Fatalf("search attribute %s holds the metadata", name)
		}
	}
	c.settled(t, id, 100, "paid")
	env.Reconcile(t)
}

// cancelSeen reports whether the latest run of workflowID has taken a Cancel request: a
// workflow task started after the request.
func cancelSeen(t *testing.T, e *testenv.Env, workflowID string) bool {
	t.Helper()
	requested := false
	for _, ev := range e.History(t, workflowID, "") {
		if ev.GetWorkflowExecutionCancelRequestedEventAttributes() != nil {
			requested = true
		}
		if requested && ev.GetWorkflowTaskStartedEventAttributes() != nil {
			return true
		}
	}
	return false
}

// The Temporal UI's "Request Cancellation" before the payout's instruction has reached the bank
// (here its money is still being held, the account's row locked) is honoured: the hold is
// released, the payout fails "cancelled by an operator", the bank never hears of it, and the run
// ends Canceled.
func TestCancelBeforeTheBank(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	ctx := context.Background()
	release := env.Hold(t, c.acc)
	answer := make(chan testenv.Response, 1)
	go func() { answer <- c.pay(t, "cancel-early", 300, payee) }()
	testenv.WaitFor(t, "the hold to wait for the account", func() bool { return env.Waiting(t) > 0 })
	wf := c.workflowID("cancel-early")
	if err := env.Temporal.CancelWorkflow(ctx, wf, ""); err != nil {
		t.Fatal(err)
	}
	// The run hears of it at its next workflow task, which a local activity that runs long
	// starts within the task's timeout (10s).
	testenv.WaitFor(t, "the run to take the cancellation", func() bool { return cancelSeen(t, env, wf) })
	release()
	if r := <-answer; r.Status != http.StatusCreated && r.Status != http.StatusAccepted {
		t.Fatalf("payout: %d %s", r.Status, r.Body)
	}
	if st := env.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Fatalf("the run ended %v, want canceled", st)
	}
	var id string
	if err := env.DB.QueryRow(ctx, `SELECT id FROM payouts WHERE workflow_id = $1`, wf).Scan(&id); err != nil {
		t.Fatal(err)
	}
	po := c.waitPayout(t, id, "failed")
	if po["failure_reason"] != "cancelled by an operator" || po["failed_at"] == nil || po["bank_payment_id"] != nil {
		t.Fatalf("GET: %v", po)
	}
	if s := ledgerState(t, env, id); s.Status != "failed" || s.Hold != "released" || s.HoldAmount != 300 || len(s.Postings) != 0 || s.EntryCount != 0 {
		t.Fatalf("the ledger: %+v, want failed, its hold released, nothing posted", s)
	}
	if ps := bankPayments(t, env, id); len(ps) != 0 {
		t.Fatalf("the bank holds %+v", ps)
	}
	c.wantBalances(t, 1_000, 1_000)
	env.RecordHistory(t, testenv.PayoutHistory, "cancelled", wf, "")

	env.Reconcile(t)
}

// Once the instruction has reached the bank, "Request Cancellation" is refused, visibly: the
// run says so in its current details (the Temporal UI shows them), and the payout ends as the
// bank says, once.
func TestCancelAfterTheBankIsRefused(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	ctx := context.Background()
	faults(t, env, map[string]any{"settle_after": "3s", "callback_drop_rate": 1})
	id := c.accepted(t, "cancel-late", 300, payee)
	wf := c.workflowID("cancel-late")
	testenv.WaitFor(t, "the run to wait on the bank", func() bool { return awaitingTheBank(t, env, wf) })
	if err := env.Temporal.CancelWorkflow(ctx, wf, ""); err != nil {
		t.Fatal(err)
	}
	if st := env.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the run ended %v, want completed", st)
	}
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	v, err := env.Temporal.QueryWorkflow(ctx, wf, "", "__temporal_workflow_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var md sdkpb.WorkflowMetadata
	if err := v.Get(&md); err != nil || !strings.Contains(md.GetCurrentDetails(), "Cancellation refused") {
		t.Fatalf("the run's current details %q (%v) do not say the cancellation was refused", md.GetCurrentDetails(), err)
	}
	env.RecordHistory(t, testenv.PayoutHistory, "cancel-refused", wf, "")
	env.Reconcile(t)
}
