package payouts_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/payments/payments/app"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/rig/testenv"
)

// TestRecordHistories writes a real history of every path of the Payout and Payin
// workflows (paid, refused, failed at the bank, returned, re-run after the bank was down, paid
// and refused answering an AnswerUpdate; credited, unmatched), which workflows' tests replay against every later change. Run it when a
// workflow changes, with a new version suffix (testenv.RecordCommand), and keep the old files;
// the payouts suite run in full with the flag also records the shapes only its other tests make.
func TestRecordHistories(t *testing.T) {
	testenv.SkipUnlessRecording(t)
	ownerID, key := env.Owner(t)
	acc := env.Account(t, key, "USD")
	env.Fund(t, acc, 1_000)
	pay := func(idem, accountNumber string, amount int64) int {
		body := fmt.Sprintf(`{"account_id":%q,"amount_minor":%d,"currency":"USD","destination":{"account_number":%q,"bank_code":"BANKUS33"}}`,
			acc, amount, accountNumber)
		return env.Do(t, "POST", "/v1/payouts", key, idem, body).Status
	}
	wf := func(idem string) string { return "payout/" + ownerID + "/" + idem }
	for _, p := range []struct {
		idem, accountNumber string
		amount              int64
		status              int
	}{
		{"rec-paid", "000123456789", 100, http.StatusCreated},
		{"rec-refused", "000123456789", 1_000_000, http.StatusUnprocessableEntity},
		{"rec-failed", "000123450002", 100, http.StatusCreated},
		{"rec-returned", "000123450003", 100, http.StatusCreated},
	} {
		if got := pay(p.idem, p.accountNumber, p.amount); got != p.status {
			t.Fatalf("%s: %d", p.idem, got)
		}
	}
	for _, path := range []string{"paid", "refused", "failed", "returned"} {
		env.RecordHistory(t, testenv.PayoutHistory, path, wf("rec-"+path), "")
	}
	// Through an API without a worker in its process: the first answer asked by AnswerUpdate.
	split := env.With(t, testenv.Options{Split: true})
	for _, p := range []struct {
		path   string
		amount int64
		status int
	}{{"asked-paid", 100, http.StatusCreated}, {"asked-refused", 1_000_000, http.StatusUnprocessableEntity}} {
		body := fmt.Sprintf(`{"account_id":%q,"amount_minor":%d,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}`,
			acc, p.amount)
		if got := split.Do(t, "POST", "/v1/payouts", key, "rec-"+p.path, body).Status; got != p.status {
			t.Fatalf("%s: %d", p.path, got)
		}
		env.RecordHistory(t, testenv.PayoutHistory, p.path, wf("rec-"+p.path), "")
	}

	// The bank down for longer than the run's retries: the run fails, the money held; a rerun
	// completes it.
	env.Bank.SetFaults(t, map[string]any{"error_rate": 1})
	if got := pay("rec-rerun", "000123456789", 100); got != http.StatusCreated {
		t.Fatalf("rerun: %d", got)
	}
	env.RecordHistory(t, testenv.PayoutHistory, "bank-down", wf("rec-rerun"), env.LatestRun(t, wf("rec-rerun")))
	env.Bank.SetFaults(t, map[string]any{"error_rate": 0})
	services := app.New(env.DB, env.Temporal, app.Settings{Converter: testenv.Converter, RetryFor: time.Minute, SyncWait: time.Second,
		Bank: config.Bank{URL: env.Bank.URL, RetryFor: 2 * time.Second, PollAfter: 200 * time.Millisecond, ReturnWindow: 5 * time.Second}}, nil, nil)
	if err := services.Payouts.RerunFailed(context.Background(), time.Time{}, func(operation.Rerun) {}); err != nil {
		t.Fatal(err)
	}
	env.RecordHistory(t, testenv.PayoutHistory, "rerun", wf("rec-rerun"), "")

	credited := env.Bank.Credit(t, numberOf(t, key, acc), 250, "USD", "rec-credited")
	unmatched := env.Bank.Credit(t, "999999999999", 250, "USD", "rec-unmatched")
	env.RecordHistory(t, testenv.PayinHistory, "credited", "payin/"+credited, "")
	env.RecordHistory(t, testenv.PayinHistory, "unmatched", "payin/"+unmatched, "")
}

func numberOf(t *testing.T, key, acc string) string {
	return env.Do(t, "GET", "/v1/accounts/"+acc, key, "", "").JSON(t)["account_number"].(string)
}

// TestRecordHistoriesOfApprovals writes a history of each way a payout waiting for approval
// ends its wait: approved (then paid), rejected, not approved in time. RecordCommand runs it
// with TestRecordHistories.
func TestRecordHistoriesOfApprovals(t *testing.T) {
	testenv.SkipUnlessRecording(t)
	e := env.With(t, testenv.Options{ApprovalThreshold: approvalThreshold, ApprovalTimeout: 2 * time.Second})
	c := newCustomer(t, e, 10_000)
	_, approver := c.approver(t)
	approved, rejected := c.pending(t, "rec-approved", 2_000), c.pending(t, "rec-rejected", 2_000)
	c.pending(t, "rec-not-approved", 2_000)
	if r := c.decide(t, approver, "rec-approve", approved, "approve", ""); r.Status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	if r := c.decide(t, approver, "rec-reject", rejected, "reject", "unknown payee"); r.Status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"approved", "rejected", "not-approved"} {
		e.RecordHistory(t, testenv.PayoutHistory, path, c.workflowID("rec-"+path), "")
	}
}
