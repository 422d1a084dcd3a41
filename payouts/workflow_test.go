package payouts_test

// The payout workflow on Temporal's test environment, where timers are skipped: the waits the
// end-to-end tests cannot afford (an hour's poll, a return window), with the activities mocked.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/ledger"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/workflows"
)

// bankSays is what the mocked bank answers the run's n-th status query.
type bankSays func(n int) (activities.BankOutcome, error)

// payoutTest is a payout's run in the test environment, with the bank answering the
// instruction pending and each status query as says; calls are the calls to SettlePayout and
// ReturnPayout, each with how many status queries had been answered then. Its hooks run inside
// the mocked activities, before they answer: held in HoldPayout, sent in SendPayout.
type payoutTest struct {
	w           *testsuite.TestWorkflowEnvironment
	in          workflows.PayoutInput
	says        bankSays
	queries     int
	calls       []string
	held, sent  func()
	sendPayouts int
	rejected    []string // the Updates the run refused, and why
}

func newPayoutTest(t *testing.T, pollAfter, returnWindow time.Duration, says bankSays) *payoutTest {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	p := &payoutTest{w: s.NewTestWorkflowEnvironment(), says: says}
	// Simulated time: a run that never ends is cut off after ten days of it (the longest window
	// here is seven), a few hundred polls, instead of the default ten years.
	p.w.SetWorkflowRunTimeout(10 * 24 * time.Hour)
	p.w.RegisterWorkflow(workflows.Payout)
	var a *activities.Activities
	p.w.RegisterActivity(a)
	p.in = workflows.PayoutInput{
		PayoutHold: ledger.PayoutHold{PayoutID: "po_1", Scope: idempotency.Scope{OwnerID: "own_1", Route: idempotency.RoutePayouts, Key: "k"}},
		WorkflowID: "payout/own_1/k", AccountID: "acc_1", AmountMinor: 100, Currency: "USD",
		Destination:  bank.Destination{AccountNumber: payee, BankCode: bankCode},
		BankRetryFor: config.Duration(time.Hour), PollAfter: config.Duration(pollAfter),
		ReturnWindow: config.Duration(returnWindow),
	}
	p.w.OnActivity(a.HoldPayout, mock.Anything, mock.Anything).Return(func(context.Context, ledger.PayoutHold) (activities.Held, error) {
		if p.held != nil {
			p.held()
		}
		return activities.Held{Status: ledger.PayoutProcessing}, nil
	})
	p.w.OnActivity(a.SendPayout, mock.Anything, mock.Anything).Return(func(context.Context, bank.Instruction) (activities.BankOutcome, error) {
		p.sendPayouts++
		if p.sent != nil {
			p.sent()
		}
		return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Pending}, nil
	})
	p.w.OnActivity(a.CheckPayout, mock.Anything, p.in.Instruction()).Return(func(context.Context, bank.Instruction) (activities.BankOutcome, error) {
		p.queries++
		return p.says(p.queries)
	})
	p.w.OnActivity(a.SettlePayout, mock.Anything, "po_1", mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ string, paid bool, reason string) (ledger.PayoutStatus, error) {
			call := fmt.Sprintf("settle paid=%v after %d queries", paid, p.queries)
			if reason != "" {
				call += " (" + reason + ")"
			}
			p.calls = append(p.calls, call)
			if paid {
				return ledger.PayoutPaid, nil
			}
			return ledger.PayoutFailed, nil
		})
	p.w.OnActivity(a.ReturnPayout, mock.Anything, "po_1", mock.Anything).Return(func(context.Context, string, string) (ledger.PayoutStatus, error) {
		p.calls = append(p.calls, fmt.Sprintf("return after %d queries", p.queries))
		return ledger.PayoutReturned, nil
	})
	return p
}

// callback delivers a bank callback to the run, as payouts.Service.Deliver does, and notes a
// refusal in p.rejected.
func (p *payoutTest) callback(id, typ, paymentID string) {
	p.w.UpdateWorkflow(workflows.BankEventUpdate, id, &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { p.rejected = append(p.rejected, id+": "+err.Error()) },
		OnComplete: func(any, error) {},
	}, workflows.BankEvent{ID: id, Type: typ, PaymentID: paymentID, Reference: "po_1", Reason: "account_closed"})
}

// callbackFromActivity is callback sent from inside a mocked activity, and waits (with a
// deadline) until the run has taken it: the test environment's Updates must not be sent while it
// still completes the one before, or they race on its bookkeeping.
func (p *payoutTest) callbackFromActivity(t *testing.T, id, typ, paymentID string) {
	done := make(chan struct{})
	p.w.UpdateWorkflow(workflows.BankEventUpdate, id, &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { p.rejected = append(p.rejected, id+": "+err.Error()); close(done) },
		OnComplete: func(any, error) { close(done) },
	}, workflows.BankEvent{ID: id, Type: typ, PaymentID: paymentID, Reference: "po_1", Reason: "account_closed"})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("callback %s not taken by the run within 10s", id)
	}
}

// run runs the payout to its end (or its run timeout) and reports whether it completed.
func (p *payoutTest) run() bool {
	p.w.ExecuteWorkflow(workflows.Payout, p.in)
	return p.w.IsWorkflowCompleted() && p.w.GetWorkflowError() == nil
}

// runPayout runs workflows.Payout with the bank answering the instruction pending and each
// status query as says, and returns the calls to SettlePayout and ReturnPayout, each with how
// many status queries had been answered then, and whether the run completed.
func runPayout(t *testing.T, pollAfter, returnWindow time.Duration, says bankSays) (calls []string, completed bool) {
	t.Helper()
	p := newPayoutTest(t, pollAfter, returnWindow, says)
	completed = p.run()
	return p.calls, completed
}

// paidThenReturnedAt: the bank says paid at the first query, and returned from the n-th on.
func paidThenReturnedAt(n int) bankSays {
	return func(q int) (activities.BankOutcome, error) {
		if q < n {
			return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Paid}, nil
		}
		return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Returned, Reason: "account closed"}, nil
	}
}

func paidAt(n int) bankSays {
	return func(q int) (activities.BankOutcome, error) {
		if q < n {
			return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Pending}, nil
		}
		return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Paid}, nil
	}
}

// With no callback, the run settles the payout only on what the bank says: paid when a status
// query says paid, never while it says pending or does not answer. PAYMENTS_BANK_POLL_AFTER
// is any duration; from an hour up, the first query must not end the wait.
func TestPayoutSettlesOnlyOnTheBanksWord(t *testing.T) {
	for _, c := range []struct {
		name      string
		pollAfter time.Duration
		says      bankSays
		want      string
	}{
		{"poll after 1m, paid at the 3rd query", time.Minute, paidAt(3), "settle paid=true after 3 queries"},
		{"poll after 2h, paid at the 3rd query", 2 * time.Hour, paidAt(3), "settle paid=true after 3 queries"},
		{"poll after 2h, no answer to the first query", 2 * time.Hour, func(q int) (activities.BankOutcome, error) {
			if q <= 3 { // the first query's three attempts
				return activities.BankOutcome{}, errors.New("the bank answered 503")
			}
			return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Paid}, nil
		}, "settle paid=true after 4 queries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls, completed := runPayout(t, c.pollAfter, 24*time.Hour, c.says)
			if len(calls) == 0 || calls[0] != c.want {
				t.Fatalf("calls %v, want %q first: the payout was settled before the bank said paid", calls, c.want)
			}
			if !completed || len(calls) != 1 {
				t.Fatalf("calls %v, completed %v", calls, completed)
			}
		})
	}
}

// Paid, the run waits for a return for the return window, asks the bank once a day and at its
// end, and ends: whatever the window's length (the tests' Env uses 5s, PAYMENTS_PAYOUT_RETURN_WINDOW
// any duration).
func TestPaidPayoutRunEndsAfterAnyReturnWindow(t *testing.T) {
	for _, window := range []time.Duration{5 * time.Second, 30 * time.Minute, 7 * 24 * time.Hour} {
		t.Run(window.String(), func(t *testing.T) {
			calls, completed := runPayout(t, time.Minute, window, paidAt(1))
			if !completed || len(calls) != 1 {
				t.Fatalf("with a %s return window: calls %v, completed %v", window, calls, completed)
			}
		})
	}
}

// A return whose callback never came is found by the run's own daily question, within the
// window: the money is credited back then, not at the window's end, and not twice.
func TestReturnWithoutCallbackIsFoundWithinADay(t *testing.T) {
	calls, completed := runPayout(t, time.Minute, 7*24*time.Hour, paidThenReturnedAt(4))
	want := []string{"settle paid=true after 1 queries", "return after 4 queries"}
	if !completed || fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("calls %v, completed %v; want %v", calls, completed, want)
	}
}

// The bank holds, under the payout's key, a payment that is not the payout's: nothing is
// settled, the run asks the bank nothing more, and stays open for a person (it is cut off here
// by its run timeout).
func TestPaymentThatIsNotThePayoutsStopsTheRun(t *testing.T) {
	asked := 0
	calls, completed := runPayout(t, time.Minute, 24*time.Hour, func(q int) (activities.BankOutcome, error) {
		asked = q
		if q < 2 {
			return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Pending}, nil
		}
		return activities.BankOutcome{}, temporal.NewNonRetryableApplicationError("the bank's payment pay_1 is 999 USD",
			activities.ErrTypeBankMismatch, nil)
	})
	if completed || len(calls) != 0 {
		t.Fatalf("calls %v, completed %v: a payout was settled on a payment that is not its own", calls, completed)
	}
	if asked != 2 {
		t.Fatalf("the bank was asked %d times: the run went on after the mismatch", asked)
	}
}

// The bank returns the payment within the window, its callback lost, and is unreachable for the
// window's last question and for days after: the run does not close its window on a question
// left unanswered, it asks again, backing off, until the bank answers, and then credits the
// return, once.
func TestReturnWindowWaitsForTheBanksLastAnswer(t *testing.T) {
	down := func(q int) bool { return q >= 2 && q <= 40 } // the window's last question onwards: 13 questions of 3 attempts
	p := newPayoutTest(t, time.Minute, 24*time.Hour, func(q int) (activities.BankOutcome, error) {
		switch {
		case q == 1:
			return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Paid}, nil
		case down(q):
			return activities.BankOutcome{}, errors.New("the bank did not answer")
		}
		return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Returned, Reason: "account_closed"}, nil
	})
	completed := p.run()
	want := []string{"settle paid=true after 1 queries", "return after 41 queries"}
	if !completed || fmt.Sprint(p.calls) != fmt.Sprint(want) {
		t.Fatalf("calls %v, completed %v; want %v: the window closed on an unanswered question", p.calls, completed, want)
	}
}

// A bank that never answers again keeps the run open, crediting nothing and settling nothing
// more, however long (here until its run timeout): no bound of the run's own ends the question.
func TestReturnWindowStaysOpenWhileTheBankIsSilent(t *testing.T) {
	p := newPayoutTest(t, time.Minute, 24*time.Hour, func(q int) (activities.BankOutcome, error) {
		if q == 1 {
			return activities.BankOutcome{PaymentID: "pay_1", Status: bank.Paid}, nil
		}
		return activities.BankOutcome{}, errors.New("the bank did not answer")
	})
	completed := p.run()
	if completed || fmt.Sprint(p.calls) != "[settle paid=true after 1 queries]" {
		t.Fatalf("calls %v, completed %v: the run ended without the bank's answer", p.calls, completed)
	}
	if p.queries < 3*20 {
		t.Fatalf("%d status queries in nine days of silence: the run stopped asking", p.queries)
	}
}

// Callbacks that come before the bank has answered the instruction cannot be told from ones
// about another payment: the run holds them, applies the one about its payment once the bank
// names it (pay_1), and drops the one about another payment (pay_2). Once it knows, a callback
// about another payment, or about none, is refused.
func TestCallbacksWaitForThePaymentID(t *testing.T) {
	p := newPayoutTest(t, time.Hour, 24*time.Hour, paidAt(1))
	p.sent = func() { // while the bank's answer is on its way
		p.callbackFromActivity(t, "evt_other_returned", bank.PaymentReturned, "pay_2")
		p.callbackFromActivity(t, "evt_paid", bank.PaymentPaid, "pay_1")
	}
	p.w.RegisterDelayedCallback(func() {
		p.callback("evt_other_returned_later", bank.PaymentReturned, "pay_2")
		p.callback("evt_no_payment", bank.PaymentReturned, "")
	}, time.Minute)
	completed := p.run()
	if want := "[settle paid=true after 0 queries]"; !completed || fmt.Sprint(p.calls) != want {
		t.Fatalf("calls %v, completed %v; want %s: a callback about another payment was applied", p.calls, completed, want)
	}
	if len(p.rejected) != 2 || !strings.Contains(p.rejected[0], "evt_other_returned_later") || !strings.Contains(p.rejected[1], "evt_no_payment") {
		t.Fatalf("refused: %v, want the two later callbacks", p.rejected)
	}
	var out workflows.PayoutOutcome
	if err := p.w.GetWorkflowResult(&out); err != nil || out.Status != ledger.PayoutPaid || out.PayoutID != "po_1" {
		t.Fatalf("result %+v, %v", out, err)
	}
}

// A Cancel request that comes before the instruction is sent (here while the money is being
// held) is honoured: the bank is never asked, the hold is released, the payout fails "cancelled
// by an operator", and the run ends Canceled.
func TestCancelBeforeTheBankFailsThePayout(t *testing.T) {
	p := newPayoutTest(t, time.Minute, 24*time.Hour, paidAt(1))
	p.held = p.w.CancelWorkflow
	p.run()
	var canceled *temporal.CanceledError
	if err := p.w.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Fatalf("the run ended with %v, want canceled", err)
	}
	if want := "[settle paid=false after 0 queries (cancelled by an operator)]"; fmt.Sprint(p.calls) != want || p.sendPayouts != 0 {
		t.Fatalf("calls %v, %d instructions sent; want %s and none", p.calls, p.sendPayouts, want)
	}
}

// A Cancel request once the instruction is sent is refused, and says so where an operator
// looks (the run's current details in the Temporal UI): the payout goes on to the bank's word.
func TestCancelAfterTheBankIsRefusedVisibly(t *testing.T) {
	p := newPayoutTest(t, time.Minute, 24*time.Hour, paidAt(2))
	var details string
	p.w.RegisterDelayedCallback(func() {
		p.w.CancelWorkflow()
	}, 30*time.Second)
	p.w.RegisterDelayedCallback(func() {
		v, err := p.w.QueryWorkflow("__temporal_workflow_metadata")
		if err != nil {
			t.Errorf("metadata query: %v", err)
			return
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Errorf("metadata: %v", err)
		}
		details = md.GetCurrentDetails()
	}, 90*time.Second)
	if !p.run() {
		t.Fatalf("the run ended with %v", p.w.GetWorkflowError())
	}
	if want := "[settle paid=true after 2 queries]"; fmt.Sprint(p.calls) != want {
		t.Fatalf("calls %v, want %s", p.calls, want)
	}
	if !strings.Contains(details, "Cancellation refused") {
		t.Fatalf("the run's current details %q do not say the cancellation was refused", details)
	}
}
