package payouts_test

// The payout workflow on Temporal's test environment, where timers are skipped: the waits the
// end-to-end tests cannot afford (an hour's poll, a return window), with the activities mocked.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/payout"
	"github.com/payments/payments/workflows"
)

// bankSays is what the mocked bank answers the run's n-th status query.
type bankSays func(n int) (activities.BankOutcome, error)

// runPayout runs workflows.Payout with the bank answering the instruction pending and each
// status query as says, and returns the calls to SettlePayout and ReturnPayout, each with how
// many status queries had been answered then, and whether the run completed.
func runPayout(t *testing.T, pollAfter, returnWindow time.Duration, says bankSays) (calls []string, completed bool) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	w := s.NewTestWorkflowEnvironment()
	// Simulated time: a run that never ends is cut off after ten days of it (the longest window
	// here is seven), a few hundred polls, instead of the default ten years.
	w.SetWorkflowRunTimeout(10 * 24 * time.Hour)
	w.RegisterWorkflow(workflows.Payout)
	var a *activities.Activities
	w.RegisterActivity(a)
	in := workflows.PayoutInput{
		PayoutHold: activities.PayoutHold{PayoutID: "po_1", OwnerID: "own_1", Route: idempotency.RoutePayouts, Key: "k"},
		WorkflowID: "payout/own_1/k", AccountID: "acc_1", AmountMinor: 100, Currency: "USD",
		Destination:  bank.Destination{AccountNumber: payee, BankCode: bankCode},
		BankRetryFor: activities.Duration(time.Hour), PollAfter: activities.Duration(pollAfter),
		ReturnWindow: activities.Duration(returnWindow),
	}
	w.OnActivity(a.HoldPayout, mock.Anything, mock.Anything).Return(activities.Held{Status: payout.Processing}, nil)
	w.OnActivity(a.SendPayout, mock.Anything, mock.Anything).Return(activities.BankOutcome{PaymentID: "pay_1", Status: bank.Pending}, nil)
	queries := 0
	w.OnActivity(a.CheckPayout, mock.Anything, in.Instruction()).Return(func(context.Context, bank.Instruction) (activities.BankOutcome, error) {
		queries++
		return says(queries)
	})
	w.OnActivity(a.SettlePayout, mock.Anything, "po_1", mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ string, paid bool, _ string) (payout.Status, error) {
			calls = append(calls, fmt.Sprintf("settle paid=%v after %d queries", paid, queries))
			if paid {
				return payout.Paid, nil
			}
			return payout.Failed, nil
		})
	w.OnActivity(a.ReturnPayout, mock.Anything, "po_1", mock.Anything).Return(func(context.Context, string, string) (payout.Status, error) {
		calls = append(calls, fmt.Sprintf("return after %d queries", queries))
		return payout.Returned, nil
	})
	w.ExecuteWorkflow(workflows.Payout, in)
	return calls, w.IsWorkflowCompleted() && w.GetWorkflowError() == nil
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
