package payouts_test

// Payouts through a bank that misbehaves (docs/bank.md, the simulator's knobs) and a processor
// that does: the bank down for longer than a run's retries, an answer lost after the bank
// accepted, callbacks that never come, a callback that comes before the API has answered, a
// worker killed while it waits on the bank. Whatever happens, the bank makes one payment per
// payout and the ledger applies its outcome once.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/app"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/rig/testenv"
	"github.com/payments/payments/workflows"
)

// runsOf lists the runs under workflow ID id that visibility shows, once it shows n.
func runsOf(t *testing.T, e *testenv.Env, id string, n int) []enums.WorkflowExecutionStatus {
	t.Helper()
	var out []enums.WorkflowExecutionStatus
	testenv.WaitFor(t, "visibility to show the runs of "+id, func() bool {
		resp, err := e.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowId = '" + id + "'"})
		if err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for _, r := range resp.GetExecutions() {
			out = append(out, r.GetStatus())
		}
		return len(out) >= n
	})
	if len(out) != n {
		t.Fatalf("%d runs under %s, want %d: %v", len(out), id, n, out)
	}
	return out
}

// downTooLong makes the bank refuse everything while a payout runs: its run gives the bank the
// instruction for BankRetryFor (2s), then fails, its money still held and nothing sent.
func downTooLong(t *testing.T, c customer, idem string) string {
	t.Helper()
	faults(t, env, map[string]any{"down_for": "1h"})
	id := c.accepted(t, idem, 300, payee) // holding the money needs no bank
	if st := env.Settled(t, c.workflowID(idem)); st != enums.WORKFLOW_EXECUTION_STATUS_FAILED {
		t.Fatalf("the run while the bank is down ended %v, want failed", st)
	}
	c.wantBalances(t, 1_000, 700)
	if s := ledgerState(t, env, id); s.Status != "processing" || s.Hold != "open" || s.BankPaymentID != "" || len(s.Postings) != 0 {
		t.Fatalf("after the failed run: %+v", s)
	}
	env.Bank.SetFaults(t, map[string]any{"down_for": "0s"}) // the bank is back
	if ps := bankPayments(t, env, id); len(ps) != 0 {
		t.Fatalf("the bank made %+v while it was down", ps)
	}
	if p := c.payout(t, id); p["status"] != "processing" {
		t.Fatalf("GET after the failed run: %v", p)
	}
	return id
}

// rerunFailed is `payments rerun failed --since` for payouts: the service the command assembles
// (app) with the Env's settings, its RerunFailed.
func rerunFailed(t *testing.T, since time.Time) []operation.Rerun {
	t.Helper()
	services := app.New(env.DB, env.Temporal, app.Settings{Converter: testenv.Converter, SyncWait: 10 * time.Second, TTL: 24 * time.Hour, RetryFor: 2 * time.Minute,
		Bank: config.Bank{URL: env.Bank.URL, Secret: testenv.BankSecret, RetryFor: 2 * time.Second, PollAfter: 200 * time.Millisecond,
			ReturnWindow: 5 * time.Second}}, slog.New(slog.DiscardHandler), nil)
	var reran []operation.Rerun
	if err := services.Payouts.RerunFailed(context.Background(), since, func(r operation.Rerun) { reran = append(reran, r) }); err != nil {
		t.Fatal(err)
	}
	return reran
}

// The bank down for longer than the run's retries, then back; `payments rerun failed` runs the
// payout again and it completes, one bank payment. The rerun goes through the same function the
// command calls (app.New(...).Payouts.RerunFailed: cmd/payments is package main): it is the
// operator's remedy for exactly this, it finds the run by its failure (no ledger rows to
// backdate), and it restarts it with the input the failed run was started with.
// TestBankDownThenRecoveryPass covers the other remedy, the recovery Schedule.
func TestBankDownThenRerunFailed(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	since := time.Now()
	id := downTooLong(t, c, "down-rerun")
	wf := c.workflowID("down-rerun")

	runsOf(t, env, wf, 1) // rerun failed finds runs through visibility
	reran := rerunFailed(t, since)
	if len(reran) != 1 || reran[0].WorkflowID != wf || reran[0].ID != id || reran[0].Outcome != "started" {
		t.Fatalf("rerun failed: %+v", reran)
	}
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	failed := 0
	for _, st := range runsOf(t, env, wf, 2) {
		if st == enums.WORKFLOW_EXECUTION_STATUS_FAILED {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed runs under %s, want the first one only", failed, wf)
	}
	// Run again, it finds the failed run and nothing more to do.
	var again []operation.Rerun
	for _, r := range rerunFailed(t, since) {
		if r.WorkflowID == wf {
			again = append(again, r)
		}
	}
	if len(again) != 1 || again[0].Outcome != "skipped" {
		t.Fatalf("second rerun of %s: %+v, want the failed run skipped", wf, again)
	}
	c.settled(t, id, 300, "paid")
	env.Reconcile(t)
}

// The same outage, remedied by the recovery Schedule: a payout still processing StaleAfter
// after its claim, whose run has ended, is started again and completes once.
func TestBankDownThenRecoveryPass(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	id := downTooLong(t, c, "down-recovery")
	if _, err := env.DB.Exec(context.Background(), `UPDATE payouts SET created_at = created_at - $2::interval WHERE id = $1`,
		id, workflows.StaleAfter+time.Minute); err != nil {
		t.Fatal(err)
	}
	var res operation.Tally
	env.RunSchedule(t, workflows.RecoveryScheduleID, &res)
	if res.Started != 1 {
		t.Fatalf("recovery pass: %+v, want the payout started again", res)
	}
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	runsOf(t, env, c.workflowID("down-recovery"), 2)
	env.Reconcile(t)
}

// The bank makes the payment and the answer is lost: the run asks again under the same key and
// finds that payment. One bank payment, the payout paid.
func TestLostBankAnswer(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	faults(t, env, map[string]any{"lost_answer_rate": 1})
	id := c.accepted(t, "lost", 300, payee)
	testenv.WaitFor(t, "the bank to make the payment", func() bool { return len(bankPayments(t, env, id)) > 0 })
	env.Bank.SetFaults(t, map[string]any{"lost_answer_rate": 0}) // the next attempt, 1s later, gets its answer
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	if n := sendAttempts(t, env, c.workflowID("lost")); n < 2 {
		t.Fatalf("SendPayout ran %d times: the answer was not lost", n)
	}
	env.Reconcile(t)
}

// sendAttempts is the attempt of SendPayout that completed in the latest run of workflowID.
func sendAttempts(t *testing.T, e *testenv.Env, workflowID string) int32 {
	t.Helper()
	scheduled := map[int64]string{}
	var attempt int32
	for _, ev := range e.History(t, workflowID, "") {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] == "SendPayout" {
			attempt = a.GetAttempt()
		}
	}
	return attempt
}

// No callback ever comes: the run asks the bank itself and settles.
func TestNoCallbackTheRunAsks(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	faults(t, env, map[string]any{"callback_drop_rate": 1})
	id := c.accepted(t, "dropped", 300, payee)
	c.waitPayout(t, id, "paid")
	p := c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	evs := bankEvents(t, env, ofPayment(p.ID))
	if len(evs) != 1 || evs[0].Type != bank.PaymentPaid || evs[0].Delivery != "dropped" || len(evs[0].Attempts) != 0 {
		t.Fatalf("the bank's events of %s: %+v", p.ID, evs)
	}
	if got := recorded(t, env, evs[0].ID); got != "" {
		t.Fatalf("the processor recorded a dropped event: %s", got)
	}
	if types := activityTypes(t, env, c.workflowID("dropped")); !strings.Contains(strings.Join(types, " "), "CheckPayout") {
		t.Fatalf("the run never asked the bank: activities %v", types)
	}
	env.Reconcile(t)
}

// The bank's callback arrives, and is applied, before the API has answered the request: the
// API still answers the first answer, 201 processing, and the outcome is applied once. The API
// here has no worker in its process, so it asks the run for its answer by Update, through a
// proxy to Temporal whose replies the test holds once the request is on its way, and lets go
// once the payout is paid.
func TestCallbackBeforeTheFirstAnswer(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	ctx := context.Background()
	toTemporal := testenv.NewProxy(t, env.TemporalAddr())
	temporal, err := client.Dial(testenv.ClientOptions(toTemporal.Addr())) // connected before the replies are held
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(temporal.Close)
	slow := env.With(t, testenv.Options{Temporal: temporal, SyncWait: time.Minute})
	t.Cleanup(toTemporal.Restore) // first: the API's request in flight then ends before its server closes

	release := env.Hold(t, c.acc) // the money cannot be held yet
	answer := make(chan testenv.Response, 1)
	go func() { answer <- slow.Do(t, "POST", "/v1/payouts", c.key, "early", payoutBody(c.acc, 300, payee)) }()
	testenv.WaitFor(t, "the hold to wait for the account", func() bool { return env.Waiting(t) > 0 })
	toTemporal.FreezeReplies() // the run's answer to the API goes nowhere
	release()

	var id string
	testenv.WaitFor(t, "the payout to be claimed", func() bool {
		return env.DB.QueryRow(ctx, `SELECT id FROM payouts WHERE workflow_id = $1`, c.workflowID("early")).Scan(&id) == nil
	})
	c.waitPayout(t, id, "paid")
	p := c.settled(t, id, 300, "paid")
	var ev bankEvent
	testenv.WaitFor(t, "the paid callback to be answered", func() bool {
		evs := bankEvents(t, env, ofPayment(p.ID))
		if len(evs) != 1 {
			t.Fatalf("the bank's events of %s: %+v", p.ID, evs)
		}
		ev = evs[0]
		return ev.answered() == 1
	})
	if got := recorded(t, env, ev.ID); got != "delivered" {
		t.Fatalf("the paid callback %s: outcome %q", ev.ID, got)
	}
	select {
	case r := <-answer:
		t.Fatalf("the API answered while its database was frozen: %d %s", r.Status, r.Body)
	default:
	}
	toTemporal.Restore()

	r := <-answer
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first answer: %d %v %s", r.Status, r.Header, r.Body)
	}
	if po := r.JSON(t); po["id"] != id || po["status"] != "processing" || po["bank_payment_id"] != nil || po["paid_at"] != nil {
		t.Fatalf("the first answer is not the one stored when the money was held: %s", r.Body)
	}
	testenv.SameAnswer(t, r, c.pay(t, "early", 300, payee))
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	env.Reconcile(t)
}

// The worker, a process of its own, is killed (SIGKILL) while the payout waits on the bank;
// another worker carries the same run on, and the payout completes once.
func TestWorkerKilledWhileWaitingOnTheBank(t *testing.T) {
	// The run waits 5s for a callback before asking the bank: when the worker dies, nothing of
	// the run is in flight, and a new worker takes the run over from its history.
	e := testenv.New(t, "payments_test_payouts_worker", testenv.Options{NoWorker: true, Bank: true, BankPollAfter: 5 * time.Second})
	first := e.Process(t, testenv.BuildPayments(t), "", []string{"worker"})
	c := newCustomer(t, e, 1_000)
	e.Bank.SetFaults(t, map[string]any{"settle_after": "2s"})
	id := c.accepted(t, "killed", 300, payee)
	wf := c.workflowID("killed")
	testenv.WaitFor(t, "the run to wait on the bank", func() bool { return awaitingTheBank(t, e, wf) })
	runID := e.LatestRun(t, wf)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if s := ledgerState(t, e, id); s.Status != "processing" || s.Hold != "open" {
		t.Fatalf("the payout settled before the worker was killed: %+v", s)
	}

	second := e.NewWorker(nil)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	if got := e.LatestRun(t, wf); got != runID {
		t.Fatalf("the payout completed in run %s, not the run the first worker left (%s)", got, runID)
	}
	runsOf(t, e, wf, 1)
	e.Reconcile(t)
}

// awaitingTheBank reports whether the latest run of workflowID has given the bank its
// instruction and then started a timer: it waits for a callback, nothing of it in flight.
func awaitingTheBank(t *testing.T, e *testenv.Env, workflowID string) bool {
	t.Helper()
	scheduled := map[int64]string{}
	sent := false
	for _, ev := range e.History(t, workflowID, "") {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] == "SendPayout" {
			sent = true
		}
		if sent && ev.GetTimerStartedEventAttributes() != nil {
			return true
		}
	}
	return false
}

// The recovery pass restarts every payout left processing without a run, however many other
// payouts are legitimately waiting on the bank (banks take days: hundreds may be processing for
// longer than StaleAfter, each with its run going). Here 500 older payouts are waiting, their run
// open, and one newer payout's run failed while the bank was down.
func TestRecoveryPassReachesEveryStalePayout(t *testing.T) {
	ctx := context.Background()
	c := newCustomer(t, env, 1_000)
	id := downTooLong(t, c, "down-behind-500")
	if _, err := env.DB.Exec(ctx, `UPDATE payouts SET created_at = created_at - $2::interval WHERE id = $1`,
		id, workflows.StaleAfter+time.Minute); err != nil {
		t.Fatal(err)
	}
	// 500 older payouts, all under one run that stays open (a task queue no worker polls).
	waiting := c.workflowID("waiting-on-the-bank")
	if _, err := env.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: waiting, TaskQueue: "nobody-polls-" + c.ownerID},
		"NotAPayout"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Temporal.TerminateWorkflow(ctx, waiting, "", "test over") })
	if _, err := env.DB.Exec(ctx, `INSERT INTO payouts (id, status, account_id, amount_minor, currency, destination_account_number,
			destination_bank_code, workflow_id, created_at)
		SELECT $1 || i, 'processing', $2, 1, 'USD', $3, $4, $5, now() - interval '2 hours'
		FROM generate_series(1, 500) AS i`, "po_waiting_"+c.ownerID+"_", c.acc, payee, bankCode, waiting); err != nil {
		t.Fatal(err)
	}
	removed := false
	remove := func() {
		if !removed {
			if _, err := env.DB.Exec(ctx, `DELETE FROM payouts WHERE workflow_id = $1`, waiting); err != nil {
				t.Error(err)
			}
			removed = true
		}
	}
	t.Cleanup(remove)

	var res operation.Tally
	env.RunSchedule(t, workflows.RecoveryScheduleID, &res)
	if res.Started != 1 {
		t.Errorf("recovery pass with 500 older payouts waiting on the bank: %+v; payout %s (its run failed) was not started again", res, id)
	}
	remove()
	if res.Started != 1 { // put it right: without the 500, the pass reaches it
		env.RunSchedule(t, workflows.RecoveryScheduleID, &res)
	}
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	env.Reconcile(t)
}

// failedActivities counts the activities of type typ that failed (all their attempts) in the
// latest run of workflowID.
func failedActivities(t *testing.T, e *testenv.Env, workflowID, typ string) int {
	t.Helper()
	scheduled := map[int64]string{}
	n := 0
	for _, ev := range e.History(t, workflowID, "") {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskFailedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] == typ {
			n++
		}
	}
	return n
}

// outcomeOfRun is the result of the latest run of workflowID, once it has ended.
func outcomeOfRun(t *testing.T, e *testenv.Env, workflowID string) workflows.PayoutOutcome {
	t.Helper()
	var out workflows.PayoutOutcome
	if err := e.Temporal.GetWorkflow(context.Background(), workflowID, "").Get(context.Background(), &out); err != nil {
		t.Fatalf("the run of %s: %v", workflowID, err)
	}
	return out
}

// The bank returns a paid payment within the payout's window, the return's callback is lost,
// and the bank is unreachable when the window ends: the run's last question goes unanswered.
// The run does not close its window on it: it asks again until the bank answers, and credits
// the money back, once (its own result says returned: not the statement Schedule's doing).
func TestReturnHeardWhenTheLastQuestionIsLost(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	faults(t, env, map[string]any{"callback_drop_rate": 1})
	id := c.accepted(t, "last-question", 300, payee)
	wf := c.workflowID("last-question")
	c.waitPayout(t, id, "paid")
	p := c.settled(t, id, 300, "paid")
	env.Bank.Return(t, p.ID, "account_closed") // within the 5s window; its callback dropped
	env.Bank.SetFaults(t, map[string]any{"down_for": "1h"})
	testenv.WaitFor(t, "the window's last question to go unanswered", func() bool {
		return failedActivities(t, env, wf, "CheckPayout") > 0
	})
	if s := ledgerState(t, env, id); s.Status != "paid" {
		t.Fatalf("the payout is %s while the bank is down", s.Status)
	}
	env.Bank.SetFaults(t, map[string]any{"down_for": "0s"})
	if st := env.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the run ended %v", st)
	}
	if out := outcomeOfRun(t, env, wf); out.Status != "returned" || out.PayoutID != id || out.FirstAnswer.Status != http.StatusCreated {
		t.Fatalf("the run's result: payout %s %s, first answer %d; want %s returned by the run itself, first answer 201",
			out.PayoutID, out.Status, out.FirstAnswer.Status, id)
	}
	creditedOnce(t, c, id)
	env.RecordHistory(t, testenv.PayoutHistory, "last-question-unanswered", wf, "")
}

// creditedOnce checks that payout id of c (300) is returned once and stays so: its entries, its
// balances, after a settle period and a pass of the statement Schedule that credits nothing.
func creditedOnce(t *testing.T, c customer, id string) {
	t.Helper()
	c.waitPayout(t, id, "returned")
	c.settled(t, id, 300, "returned")
	c.wantBalances(t, 1_000, 1_000)
	time.Sleep(testenv.SettlePeriod)
	var res activities.StatementResult
	env.RunSchedule(t, workflows.StatementScheduleID, &res)
	if res.Returned == 0 || res.Disagreed != 0 {
		t.Fatalf("statement pass: %+v", res)
	}
	c.settled(t, id, 300, "returned")
	c.wantBalances(t, 1_000, 1_000)
	if po := c.payout(t, id); po["failure_reason"] != "account_closed" || po["returned_at"] == nil {
		t.Fatalf("GET: %v", po)
	}
	env.Reconcile(t)
}

// The bank returns a payment after the payout's window has closed, and the return's callback
// is lost: the statement Schedule finds it on the bank's statement and credits it back, once.
func TestReturnAfterTheWindowFoundOnTheStatement(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	faults(t, env, map[string]any{"callback_drop_rate": 1})
	id := c.accepted(t, "after-window", 300, payee)
	wf := c.workflowID("after-window")
	if st := env.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the run ended %v", st)
	}
	p := c.settled(t, id, 300, "paid")
	env.Bank.Return(t, p.ID, "account_closed")
	time.Sleep(testenv.SettlePeriod)
	if s := ledgerState(t, env, id); s.Status != "paid" || len(s.Postings) != 1 {
		t.Fatalf("before the statement pass: %+v", s)
	}
	var res activities.StatementResult
	env.RunSchedule(t, workflows.StatementScheduleID, &res)
	if res.Credited < 1 {
		t.Fatalf("statement pass: %+v, want the return credited", res)
	}
	creditedOnce(t, c, id)
	if testenv.Recording() {
		env.RecordHistory(t, testenv.StatementHistory, "credited", latestScheduledRun(t, env, workflows.StatementScheduleID), "")
	}
}

// latestScheduledRun is the workflow ID of the latest run Schedule id started.
func latestScheduledRun(t *testing.T, e *testenv.Env, id string) string {
	t.Helper()
	d, err := e.Temporal.ScheduleClient().GetHandle(context.Background(), id).Describe(context.Background())
	if err != nil || len(d.Info.RecentActions) == 0 {
		t.Fatalf("schedule %s: %v", id, err)
	}
	return d.Info.RecentActions[len(d.Info.RecentActions)-1].StartWorkflowResult.WorkflowID
}

// Signed callbacks about another payment than the payout's, or about none, change nothing:
// before the payout has recorded its bank payment (the bank's answer to the instruction is
// lost, again and again) its run holds them, and drops the one about another payment once the
// bank names its own; after, they are refused at the edge. The payout ends as the bank says.
func TestCallbacksAboutAnotherPaymentChangeNothing(t *testing.T) {
	api := env.With(t, testenv.Options{BankRetryFor: time.Minute}) // the run gives the bank its instruction for a minute
	c := newCustomer(t, api, 1_000)
	faults(t, env, map[string]any{"lost_answer_rate": 1, "callback_drop_rate": 1})
	id := c.accepted(t, "other-payment", 300, payee)
	wf := c.workflowID("other-payment")
	testenv.WaitFor(t, "the bank to make the payment", func() bool { return len(bankPayments(t, env, id)) == 1 })
	real := bankPayments(t, env, id)[0]
	n := time.Now().UnixNano()
	event := func(name, paymentID string) []byte {
		return fmt.Appendf(nil, `{"id":"evt_%s_%d","type":"payment.returned","created_at":%q,"data":{"payment_id":%q,"reference":%q,"reason":"forged"}}`,
			name, n, time.Now().UTC().Format(time.RFC3339), paymentID, id)
	}
	unchanged := func(when string) {
		t.Helper()
		if s := ledgerState(t, env, id); s.Status != "processing" || s.Hold != "open" || len(s.Postings) != 0 || s.BankPaymentID != "" {
			t.Fatalf("%s: %+v", when, s)
		}
		c.wantBalances(t, 1_000, 700)
	}
	unchanged("before the callbacks")
	for name, want := range map[string]string{"none_early": "rejected", "other_early": "delivered"} {
		paymentID := map[string]string{"none_early": "", "other_early": "pay_not_" + real.ID}[name]
		if o := outcomeOf(t, deliver(t, env, secret, time.Now(), event(name, paymentID))); !strings.HasPrefix(o, want) {
			t.Fatalf("%s: outcome %q, want %s", name, o, want)
		}
	}
	time.Sleep(testenv.SettlePeriod)
	unchanged("after the callbacks")

	env.Bank.SetFaults(t, map[string]any{"lost_answer_rate": 0}) // the next attempt gets its answer: the run learns its payment
	if st := env.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the run ended %v", st)
	}
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	env.RecordHistory(t, testenv.PayoutHistory, "held-callback", wf, "")

	for name, paymentID := range map[string]string{"none_late": "", "other_late": "pay_not_" + real.ID} {
		if o := outcomeOf(t, deliver(t, env, secret, time.Now(), event(name, paymentID))); !strings.HasPrefix(o, "rejected") {
			t.Fatalf("%s after the payment is recorded: outcome %q", name, o)
		}
	}
	time.Sleep(testenv.SettlePeriod)
	c.settled(t, id, 300, "paid")
	c.wantBalances(t, 700, 700)
	env.Reconcile(t)
}
