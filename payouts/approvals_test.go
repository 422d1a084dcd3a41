package payouts_test

// Approvals (docs/contract.md §9): a payout at or above the threshold waits in pending_approval
// with its money held until a second key of its owner, with the payouts:approve scope, approves
// or rejects it, or until its timeout fails it. Each test checks the answers, the ledger and the
// bank's statement, and ends with reconcile clean.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/rig/testenv"
)

const approvalThreshold = 1_000

// approvals is an API that holds payouts of approvalThreshold or more for approval, until
// timeout (72h when 0).
func approvals(t *testing.T, timeout time.Duration) *testenv.Env {
	return env.With(t, testenv.Options{ApprovalThreshold: approvalThreshold, ApprovalTimeout: timeout})
}

// approver is a second key of c's owner that may decide on c's payouts.
func (c customer) approver(t *testing.T) (id, key string) {
	return c.e.SecondKey(t, c.ownerID, auth.ScopeRead, auth.ScopeApprove)
}

// decide sends POST /v1/payouts/{id}/{verdict} ("approve" or "reject") with key under idem.
func (c customer) decide(t *testing.T, key, idem, id, verdict, reason string) testenv.Response {
	t.Helper()
	body := "{}"
	if reason != "" {
		body = fmt.Sprintf(`{"reason":%q}`, reason)
	}
	return c.e.Do(t, "POST", "/v1/payouts/"+id+"/"+verdict, key, idem, body)
}

// pending sends a payout that must be answered 201 pending_approval, with its money held, and
// returns its id.
func (c customer) pending(t *testing.T, idem string, amount int64) string {
	t.Helper()
	r := c.pay(t, idem, amount, payee)
	po := r.JSON(t)
	if r.Status != http.StatusCreated || po["status"] != "pending_approval" || po["approved_by"] != nil || po["rejected_by"] != nil {
		t.Fatalf("payout %s of %d: %d %s, want 201 pending_approval", idem, amount, r.Status, r.Body)
	}
	id := po["id"].(string)
	if s := ledgerState(t, c.e, id); s.Status != "pending_approval" || s.Hold != "open" || s.HoldAmount != amount || len(s.Postings) != 0 {
		t.Fatalf("pending payout %s in the ledger: %+v", id, s)
	}
	return id
}

// wantNotPending checks that r is a final 422 payout-not-pending-approval about payout id in
// status.
func wantNotPending(t *testing.T, r testenv.Response, id, status string) {
	t.Helper()
	if r.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, r) != "payout-not-pending-approval" ||
		r.JSON(t)["payout_id"] != id || r.JSON(t)["payout_status"] != status {
		t.Fatalf("a decision on payout %s (%s): %d %s, want 422 payout-not-pending-approval", id, status, r.Status, r.Body)
	}
}

// Approved: below the threshold a payout goes to the bank at once; at it, it waits with its money
// held and the bank told nothing, until a second key approves it; then the bank pays it once.
// The approval replays byte for byte; a rejection after it is final 422, stored.
func TestApprovedPayoutIsPaidOnce(t *testing.T) {
	e := approvals(t, 0)
	c := newCustomer(t, e, 5_000)
	approverID, approver := c.approver(t)

	small := c.accepted(t, "small", approvalThreshold-1, payee)
	c.waitPayout(t, small, "paid")
	id := c.pending(t, "large", 2_000)
	c.wantBalances(t, 5_000-(approvalThreshold-1), 5_000-(approvalThreshold-1)-2_000)
	if !e.HasEvent(t, c.key, "payout.pending_approval", id) || e.HasEvent(t, c.key, "payout.pending_approval", small) {
		t.Fatal("payout.pending_approval: want one for the large payout and none for the small one")
	}
	if len(bankPayments(t, e, id)) != 0 {
		t.Fatal("the bank was told of a payout waiting for approval")
	}
	// The UI's summary of the run says since when, for how much and who asked.
	desc, err := e.Temporal.DescribeWorkflowExecution(context.Background(), c.workflowID("large"), "")
	if err != nil {
		t.Fatal(err)
	}
	var summary string
	if err := testenv.Converter.FromPayload(desc.GetExecutionConfig().GetUserMetadata().GetSummary(), &summary); err != nil ||
		!strings.Contains(summary, "of 2,000 USD minor") || !strings.Contains(summary, "approval asked ") ||
		!strings.Contains(summary, " by "+e.KeyID(t, c.key)+", due by ") {
		t.Fatalf("summary %q (%v): want the amount, since when, by which key, due by", summary, err)
	}
	r := c.decide(t, c.key, "small-approve", small, "approve", "") // the creator's key: never
	if r.Status != http.StatusForbidden {
		t.Fatalf("the creator approving: %d %s", r.Status, r.Body)
	}
	wantNotPending(t, c.decide(t, approver, "small-approve", small, "approve", ""), small, "paid")

	r = c.decide(t, approver, "ok", id, "approve", "")
	po := r.JSON(t)
	if r.Status != http.StatusOK || po["id"] != id || po["status"] != "processing" || po["approved_by"] != approverID || po["rejected_by"] != nil {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	got := c.waitPayout(t, id, "paid")
	c.settled(t, id, 2_000, "paid")
	if got["approved_by"] != approverID {
		t.Fatalf("paid payout: %v", got)
	}
	c.wantBalances(t, 5_000-(approvalThreshold-1)-2_000, 5_000-(approvalThreshold-1)-2_000)
	if !e.HasEvent(t, c.key, "payout.processing", id) || !e.HasEvent(t, c.key, "payout.paid", id) {
		t.Fatal("want payout.processing and payout.paid events for the approved payout")
	}

	testenv.SameAnswer(t, r, c.decide(t, approver, "ok", id, "approve", ""))
	late := c.decide(t, approver, "late", id, "reject", "too late")
	wantNotPending(t, late, id, "paid")
	testenv.SameAnswer(t, late, c.decide(t, approver, "late", id, "reject", "too late"))
	if e.Settled(t, c.workflowID("large")) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the approved payout's run did not complete")
	}
	c.settled(t, id, 2_000, "paid")
	e.Reconcile(t)
}

// Rejected: the hold is released, the payout fails saying who rejected it and why, and its run
// ends without a word to the bank. An approval after it is final 422, stored.
func TestRejectedPayoutReleasesItsHold(t *testing.T) {
	e := approvals(t, 0)
	c := newCustomer(t, e, 5_000)
	approverID, approver := c.approver(t)
	id := c.pending(t, "large", 3_000)

	r := c.decide(t, approver, "no", id, "reject", "unknown payee")
	po := r.JSON(t)
	want := "rejected by " + approverID + ": unknown payee"
	if r.Status != http.StatusOK || po["status"] != "failed" || po["rejected_by"] != approverID || po["approved_by"] != nil ||
		po["failure_reason"] != want || po["failed_at"] == nil {
		t.Fatalf("reject: %d %s", r.Status, r.Body)
	}
	if e.Settled(t, c.workflowID("large")) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the rejected payout's run did not complete")
	}
	c.wantBalances(t, 5_000, 5_000)
	if s := ledgerState(t, e, id); s.Status != "failed" || s.Hold != "released" || s.Reason != want || len(s.Postings) != 0 {
		t.Fatalf("rejected payout in the ledger: %+v", s)
	}
	if len(bankPayments(t, e, id)) != 0 {
		t.Fatal("the bank was told of a rejected payout")
	}
	if !e.HasEvent(t, c.key, "payout.failed", id) || e.HasEvent(t, c.key, "payout.processing", id) {
		t.Fatal("want payout.failed and no payout.processing for the rejected payout")
	}
	testenv.SameAnswer(t, r, c.decide(t, approver, "no", id, "reject", "unknown payee"))
	late := c.decide(t, approver, "late", id, "approve", "")
	wantNotPending(t, late, id, "failed")
	testenv.SameAnswer(t, late, c.decide(t, approver, "late", id, "approve", ""))
	c.wantBalances(t, 5_000, 5_000)
	e.Reconcile(t)
}

// Who may decide: not the key that created the payout (though it has payouts:approve), not a
// key without payouts:approve (both
// 403 approval-not-allowed), not another owner's key (404); none of these is stored, so the same
// idempotency key then serves a key that may. Nothing moves meanwhile.
func TestOnlyASecondKeyMayDecide(t *testing.T) {
	e := approvals(t, 0)
	c := newCustomer(t, e, 5_000)
	_, plain := e.SecondKey(t, c.ownerID) // the default scopes: everything but payouts:approve
	_, approver := c.approver(t)
	other := newCustomer(t, e, 0)
	_, stranger := other.approver(t)
	// The payout's creator may approve others' payouts: it is refused for being its creator.
	_, c.key = e.SecondKey(t, c.ownerID, auth.Scopes...)
	id := c.pending(t, "large", 1_500)

	for _, try := range []struct {
		who, key string
		status   int
	}{{"the creating key", c.key, http.StatusForbidden}, {"a key without payouts:approve", plain, http.StatusForbidden},
		{"another owner's approver", stranger, http.StatusNotFound}} {
		for _, verdict := range []string{"approve", "reject"} {
			r := c.decide(t, try.key, "d-"+verdict, id, verdict, "")
			slug := map[int]string{http.StatusForbidden: "approval-not-allowed", http.StatusNotFound: "not-found"}[try.status]
			if r.Status != try.status || testenv.ProblemType(t, r) != slug {
				t.Fatalf("%s: %s: %d %s, want %d %s", try.who, verdict, r.Status, r.Body, try.status, slug)
			}
		}
	}
	c.wantBalances(t, 5_000, 3_500)
	if s := ledgerState(t, e, id); s.Status != "pending_approval" || s.Hold != "open" {
		t.Fatalf("after refused decisions: %+v", s)
	}
	if r := c.decide(t, approver, "d-approve", id, "approve", ""); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the approver, under a key the refused ones used: %d %v %s", r.Status, r.Header, r.Body)
	}
	c.waitPayout(t, id, "paid")
	c.settled(t, id, 1_500, "paid")
	e.Reconcile(t)
}

// Not decided in time: the payout's own timer fails it and releases the hold; a decision after
// that is final 422, stored.
func TestPayoutNotApprovedInTimeFails(t *testing.T) {
	e := approvals(t, 2*time.Second)
	c := newCustomer(t, e, 5_000)
	_, approver := c.approver(t)
	id := c.pending(t, "large", 4_000)

	po := c.waitPayout(t, id, "failed")
	reason, _ := po["failure_reason"].(string)
	if !strings.HasPrefix(reason, "not approved by ") || po["rejected_by"] != nil || po["approved_by"] != nil {
		t.Fatalf("timed out: %v", po)
	}
	if e.Settled(t, c.workflowID("large")) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the timed-out payout's run did not complete")
	}
	c.wantBalances(t, 5_000, 5_000)
	if s := ledgerState(t, e, id); s.Hold != "released" || len(s.Postings) != 0 || len(bankPayments(t, e, id)) != 0 {
		t.Fatalf("timed-out payout: %+v", s)
	}
	late := c.decide(t, approver, "late", id, "approve", "")
	wantNotPending(t, late, id, "failed")
	testenv.SameAnswer(t, late, c.decide(t, approver, "late", id, "approve", ""))
	e.Reconcile(t)
}

// Twenty approvals at once, each under its own key: exactly one wins, every other is 422, every
// answer replays, and the bank pays once.
func TestConcurrentApprovalsPayOnce(t *testing.T) {
	e := approvals(t, 0)
	c := newCustomer(t, e, 5_000)
	approverID, approver := c.approver(t)
	id := c.pending(t, "large", 2_500)

	const n = 20
	answers := make([]testenv.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = c.finalDecision(t, approver, fmt.Sprintf("approve-%d", i), id) })
	}
	wg.Wait()
	won := 0
	for i, r := range answers {
		switch r.Status {
		case http.StatusOK:
			won++
			if r.JSON(t)["approved_by"] != approverID {
				t.Fatalf("winning approval: %s", r.Body)
			}
		case http.StatusUnprocessableEntity: // lost to the winner: processing, or paid already
			if st := r.JSON(t)["payout_status"]; st == "paid" {
				wantNotPending(t, r, id, "paid")
			} else {
				wantNotPending(t, r, id, "processing")
			}
		default:
			t.Fatalf("approval %d: %d %s", i, r.Status, r.Body)
		}
		testenv.SameAnswer(t, r, c.decide(t, approver, fmt.Sprintf("approve-%d", i), id, "approve", ""))
	}
	if won != 1 {
		t.Fatalf("%d approvals won, want exactly 1", won)
	}
	c.waitPayout(t, id, "paid")
	testenv.WaitForCount(t, "bank payments of the payout", 1, func() int { return len(bankPayments(t, e, id)) })
	c.settled(t, id, 2_500, "paid")
	c.wantBalances(t, 2_500, 2_500)
	e.Reconcile(t)
}

// finalDecision approves payout id under idem until the answer is final: a 409 (the key in use by
// a concurrent request, or the payout's money not held yet) or a 503 (Temporal busy: twenty
// Updates at once on one run may exceed its in-flight limit under load) is sent again, as a
// client would, for at most a minute.
func (c customer) finalDecision(t *testing.T, key, idem, id string) testenv.Response {
	deadline := time.Now().Add(time.Minute)
	for {
		r := c.decide(t, key, idem, id, "approve", "")
		if r.Status != http.StatusConflict && r.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An operator's "Request Cancellation" of a payout waiting for approval fails it, as a
// rejection would: the hold released, the run Canceled, the bank never told; an approval after
// it is final 422.
func TestCancellingAPendingPayoutReleasesIt(t *testing.T) {
	e := approvals(t, 0)
	c := newCustomer(t, e, 5_000)
	_, approver := c.approver(t)
	id := c.pending(t, "large", 1_200)
	wf := c.workflowID("large")
	if err := e.Temporal.CancelWorkflow(context.Background(), wf, ""); err != nil {
		t.Fatal(err)
	}
	if st := e.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Fatalf("the run ended %v, want canceled", st)
	}
	po := c.waitPayout(t, id, "failed")
	if po["failure_reason"] != "cancelled by an operator" || po["rejected_by"] != nil || po["approved_by"] != nil {
		t.Fatalf("cancelled: %v", po)
	}
	c.wantBalances(t, 5_000, 5_000)
	if s := ledgerState(t, e, id); s.Hold != "released" || len(s.Postings) != 0 || len(bankPayments(t, e, id)) != 0 {
		t.Fatalf("cancelled payout: %+v", s)
	}
	wantNotPending(t, c.decide(t, approver, "late", id, "approve", ""), id, "failed")
	e.Reconcile(t)
}
