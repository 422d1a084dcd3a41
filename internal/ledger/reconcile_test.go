package ledger_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
)

// broken reconciles inside tx and returns the ids of the broken invariants.
func broken(t *testing.T, tx pgx.Tx, ttl time.Duration) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(violations(t, tx, ttl, nil)))
}

// violations reconciles inside tx against the bank's statement (invariant 8 is not checked
// without one) and returns the violations of each broken invariant, by id.
func violations(t *testing.T, tx pgx.Tx, ttl time.Duration, statement []bank.Payment) map[string][]string {
	t.Helper()
	report, err := ledger.Reconcile(context.Background(), tx, ttl, statement)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, c := range report.Checks {
		if len(c.Violations) > 0 {
			out[c.ID] = c.Violations
		}
	}
	return out
}

// Each invariant is broken on purpose, in a transaction rolled back afterwards, and reconcile
// must say which.
func TestReconcileFindsEachBrokenInvariant(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	p := posting(a, b, 300)
	if _, _, err := l.Post(ctx, p, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	other := posting(a, account(t, "USD", 0), 100) // between other accounts
	if _, _, err := l.Post(ctx, other, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	r := refund(p, 100)
	if _, _, err := l.Post(ctx, r, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	breakEach(t, nil, nil, []breakage{
		{"a completed transfer whose entries do not match it", "1", true,
			[]string{`UPDATE transfers SET amount_minor = 301 WHERE id = '` + p.TransferID + `'`}},
		{"a rejected transfer with entries", "1", false,
			[]string{`UPDATE transfers SET status = 'rejected' WHERE id = '` + p.TransferID + `'`}},
		{"a balance that is not the sum of its entries", "2", true,
			[]string{`UPDATE accounts SET balance_minor = balance_minor + 1 WHERE id = '` + b + `'`,
				`UPDATE accounts SET balance_minor = balance_minor - 1 WHERE id = '` + money.FundingAccountID("USD") + `'`}},
		{"money created from nothing", "3", false,
			[]string{`UPDATE accounts SET balance_minor = balance_minor + 5 WHERE id = '` + b + `'`}},
		{"a negative customer balance", "4", false,
			[]string{`ALTER TABLE accounts DROP CONSTRAINT customer_available_not_negative`,
				`UPDATE accounts SET balance_minor = -5 WHERE id = '` + b + `'`}},
		{"a transfer outside any idempotency scope", "5", true,
			[]string{`UPDATE transfers SET workflow_id = 'somewhere' WHERE id = '` + p.TransferID + `'`}},
		{"money taken from a customer account under another owner's scope", "5a", true,
			[]string{`UPDATE accounts SET owner_id = 'own_system' WHERE id = '` + a + `'`}},
		{"a stored answer that says something else than the ledger", "5b", true,
			[]string{`INSERT INTO idempotency_records (owner_id, route, key, fingerprint, resource_id, status_code, content_type, body)
				VALUES ('own_x', 'POST /v1/transfers', 'k', '\x00', '` + p.TransferID + `', 422, 'application/problem+json',
				'{"type":"/problems/insufficient-funds","transfer_id":"` + p.TransferID + `"}')`}},
		{"a transfer id posted twice", "5", false,
			[]string{`ALTER TABLE entries DROP CONSTRAINT entries_transfer_id_account_id_key`,
				`INSERT INTO entries (transfer_id, account_id, amount_minor, balance_after_minor)
				 SELECT transfer_id, account_id, amount_minor, balance_after_minor FROM entries WHERE transfer_id = '` + p.TransferID + `'`}},
		{"a completed transfer without its event", "9", true,
			[]string{`DELETE FROM webhook_deliveries`, `DELETE FROM event_owners WHERE event_seq IN (SELECT seq FROM events WHERE object_id = '` + p.TransferID + `')`,
				`DELETE FROM events WHERE object_id = '` + p.TransferID + `'`}},
		{"an event of a change that never committed", "9", true,
			[]string{`INSERT INTO events (seq, id, type, object_id, body, created_at)
				SELECT nextval('event_seq'), 'evt_ghost', 'transfer.rejected', '` + p.TransferID + `', '{}', now()`,
				`INSERT INTO event_owners (owner_id, event_seq, type) SELECT o.owner_id, e.seq, e.type
				FROM events e, event_owners o WHERE e.id = 'evt_ghost' AND o.event_seq = (SELECT min(seq) FROM events WHERE object_id = '` + p.TransferID + `') LIMIT 1`}},
		{"a transfer showing less refunded than its refunds moved", "10", true,
			[]string{`UPDATE transfers SET amount_refunded_minor = 0 WHERE id = '` + p.TransferID + `'`}},
		{"a refund of a transfer it does not reverse", "10", true,
			[]string{`UPDATE transfers SET refund_of = '` + other.TransferID + `' WHERE id = '` + r.TransferID + `'`,
				`UPDATE transfers SET amount_refunded_minor = 100 WHERE id = '` + other.TransferID + `'`,
				`UPDATE transfers SET amount_refunded_minor = 0 WHERE id = '` + p.TransferID + `'`}},
		{"a refund without its event", "9", true,
			[]string{`DELETE FROM event_owners WHERE event_seq IN (SELECT seq FROM events WHERE object_id = '` + r.TransferID + `')`,
				`DELETE FROM events WHERE object_id = '` + r.TransferID + `'`}},
	})
}

// breakage is one invariant broken on purpose by sql.
type breakage struct {
	name string
	// invariant is the id of the one broken, and optionally ": " and words one of its
	// violations must say (which of its checks found it).
	invariant string
	only      bool // no other invariant breaks with it
	sql       []string
}

// breakEach runs each case in a transaction rolled back afterwards: the ledger reconciles
// against the bank's statement before, and after the case's sql, against the statement after
// (the bank's side broken, when it is not before), reconcile must report the invariant the case
// breaks. A nil statement leaves invariant 8 unchecked.
func breakEach(t *testing.T, before, after []bank.Payment, cases []breakage) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx, err := l.DB.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if got := violations(t, tx, ttl, before); len(got) != 0 {
				t.Fatalf("broken before breaking anything: %v", got)
			}
			for _, sql := range c.sql {
				if _, err := tx.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			got := violations(t, tx, ttl, after)
			id, says, _ := strings.Cut(c.invariant, ": ")
			said := slices.ContainsFunc(got[id], func(v string) bool { return strings.Contains(v, says) })
			if !said || (c.only && len(got) != 1) {
				t.Fatalf("broken invariants %v, want %s", got, c.invariant)
			}
		})
	}
}

// Invariants 5c, 6, 7 and 8 broken on purpose, on a ledger with a payin credited, a payout paid
// (its payment on the bank's statement) and one processing with its money held.
func TestReconcileFindsBrokenPayinsPayoutsAndHolds(t *testing.T) {
	ctx := context.Background()
	a := account(t, "USD", 1_000)
	acc, err := l.Account(ctx, "", a)
	if err != nil {
		t.Fatal(err)
	}
	pi, err := l.CreditPayin(ctx, ledger.Credit{BankEventID: ledger.NewID("bevt_"), AccountNumber: acc.AccountNumber,
		AmountMinor: 250, Currency: "USD", Reference: "invoice 7"})
	if err != nil || pi.Status != ledger.PayinCredited {
		t.Fatalf("payin %+v, %v", pi, err)
	}
	paid := heldPayout(t, a, 100)
	if err := l.RecordBankPayment(ctx, paid, "pay_"+paid); err != nil {
		t.Fatal(err)
	}
	if po, err := l.SettlePayout(ctx, paid, true, ""); err != nil || po.Status != ledger.PayoutPaid {
		t.Fatalf("settle: %+v, %v", po, err)
	}
	held := heldPayout(t, a, 300)
	bankPaid := bank.Payment{ID: "pay_" + paid, Reference: paid, AmountMinor: 100, Currency: "USD", Status: bank.Paid}
	statement := []bank.Payment{bankPaid}
	where := func(id string) string { return ` WHERE id = '` + id + `'` }
	breakEach(t, statement, statement, []breakage{
		{"a credited payin of another amount than its posting", "5c", true,
			[]string{`UPDATE payins SET amount_minor = 251` + where(pi.ID)}},
		{"a credited payin into another account than its posting's", "5c", true,
			[]string{`UPDATE payins SET account_id = '` + account(t, "USD", 0) + `'` + where(pi.ID)}},
		{"an unmatched payin whose money was credited", "5c: (unmatched,", false,
			[]string{`UPDATE payins SET status = 'unmatched', account_id = NULL` + where(pi.ID)}},
		{"a payin posting of no payin", "5c: has no payin", false,
			[]string{`DELETE FROM payins` + where(pi.ID)}},
		{"a paid payout whose hold was released", "6: (paid): hold released", true,
			[]string{`UPDATE holds SET status = 'released' WHERE payout_id = '` + paid + `'`}},
		{"a hold of another amount than its payout", "6: (paid): hold posted", true,
			[]string{`UPDATE holds SET amount_minor = 99 WHERE payout_id = '` + paid + `'`}},
		{"a failed payout whose hold is still open", "6: (failed): hold open", false,
			[]string{`UPDATE payouts SET status = 'failed', failed_at = now()` + where(held)}},
		{"a returned payout without its return posting", "6: postings", false,
			[]string{`UPDATE payouts SET status = 'returned', returned_at = now()` + where(paid)}},
		{"an account whose held amount is not the sum of its open holds", "7: held 301, open holds 300", true,
			[]string{`UPDATE accounts SET held_minor = held_minor + 1` + where(a)}},
		{"a customer account holding more than it has", "7: held 5000, open holds 5000", true,
			[]string{`ALTER TABLE accounts DROP CONSTRAINT customer_available_not_negative`,
				`UPDATE payouts SET amount_minor = 5000` + where(held),
				`UPDATE holds SET amount_minor = 5000 WHERE payout_id = '` + held + `'`,
				`UPDATE accounts SET held_minor = 5000` + where(a)}},
	})
	second := bankPaid
	second.ID = "pay_again_" + paid
	breakEach(t, statement, []bank.Payment{bankPaid, second}, []breakage{{"a payout the bank paid twice", "8: has 2 bank payments", true, nil}})
	ghost := bankPaid
	ghost.ID, ghost.Reference = "pay_ghost_"+paid, "po_ghost_"+paid
	breakEach(t, statement, []bank.Payment{bankPaid, ghost}, []breakage{{"a bank payment of no payout", "8: which does not exist", true, nil}})
}

// heldPayout makes a payout of amount USD from account and holds its money, as the API and the
// payout's run do, and returns its id.
func heldPayout(t *testing.T, account string, amount int64) string {
	t.Helper()
	return heldPayoutFor(t, account, amount, 0)
}

// heldPayoutFor is heldPayout of a payout that waits for approval for approvalFor (none when 0).
func heldPayoutFor(t *testing.T, account string, amount int64, approvalFor time.Duration) string {
	t.Helper()
	ctx := context.Background()
	acc, err := l.Account(ctx, "", account)
	if err != nil {
		t.Fatal(err)
	}
	scope := idempotency.Scope{OwnerID: acc.OwnerID, Route: idempotency.RoutePayouts, Key: ledger.NewID("k")}
	id := scope.PayoutID(0)
	if _, err := ledger.InsertPayout(ctx, l.DB, ledger.Payout{ID: id, AccountID: account, AmountMinor: amount, Currency: "USD",
		Destination: bank.Destination{AccountNumber: "000123456789", BankCode: "021000021"}, WorkflowID: scope.WorkflowID()}, approvalFor); err != nil {
		t.Fatal(err)
	}
	want := ledger.PayoutProcessing
	if approvalFor > 0 {
		want = ledger.PayoutPendingApproval
	}
	if po, _, err := l.PlaceHold(ctx, ledger.PayoutHold{PayoutID: id, Scope: scope, ReplayFor: config.Duration(ttl)}, api.PayoutAnswer); err != nil || po.Status != want {
		t.Fatalf("hold: %+v, %v", po, err)
	}
	return id
}

// Invariant 6a broken on purpose, on a ledger with a payout approved (and a rejection of it that
// came after, answered 422), one rejected and one still waiting.
func TestReconcileFindsBrokenApprovals(t *testing.T) {
	ctx := context.Background()
	a := account(t, "USD", 1_000)
	acc, err := l.Account(ctx, "", a)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(id string, route string, v ledger.Verdict, key string) (idempotency.Scope, idempotency.Response) {
		t.Helper()
		s := idempotency.Scope{OwnerID: acc.OwnerID, Route: route, Key: ledger.NewID("k")}
		if _, _, err := idempotency.Claim(ctx, l.DB, s, []byte("fp"), id); err != nil {
			t.Fatal(err)
		}
		_, resp, err := l.DecideApproval(ctx, ledger.Approval{PayoutID: id, Verdict: v, KeyID: key, Scope: s, ReplayFor: config.Duration(ttl)}, api.ApprovalAnswer)
		if err != nil {
			t.Fatal(err)
		}
		return s, resp
	}
	approved, rejected := heldPayoutFor(t, a, 100, time.Hour), heldPayoutFor(t, a, 200, time.Hour)
	heldPayoutFor(t, a, 300, time.Hour)
	if _, resp := decide(approved, idempotency.RouteApprove, ledger.VerdictApprove, "key_approver"); resp.Status != 200 {
		t.Fatalf("approve: %d %s", resp.Status, resp.Body)
	}
	late, resp := decide(approved, idempotency.RouteReject, ledger.VerdictReject, "key_approver")
	if resp.Status != 422 {
		t.Fatalf("a rejection after the approval: %d %s", resp.Status, resp.Body)
	}
	if _, resp := decide(rejected, idempotency.RouteReject, ledger.VerdictReject, "key_approver"); resp.Status != 200 {
		t.Fatalf("reject: %d %s", resp.Status, resp.Body)
	}
	where := func(id string) string { return ` WHERE id = '` + id + `'` }
	breakEach(t, nil, nil, []breakage{
		{"a payout on its way to the bank that nobody approved", "6a: approved by nobody", false,
			[]string{`UPDATE payouts SET approved_by = NULL` + where(approved)}},
		{"a rejected payout that went on", "6a: (processing): approved by nobody, rejected by key_approver", false,
			[]string{`UPDATE payouts SET status = 'processing', failed_at = NULL, failure_reason = NULL` + where(rejected)}},
		{"an approval answered for another key than the one recorded", "6a: answers 200", true,
			[]string{`UPDATE payouts SET approved_by = 'key_someone_else'` + where(approved)}},
		{"a payout approved by the key that asked for it", "6a: approved by key_approver", true,
			[]string{`ALTER TABLE payouts DROP CONSTRAINT payouts_decided_by_another`,
				`UPDATE payouts SET created_by_key = 'key_approver'` + where(approved)}},
		{"two decisions of one payout that both won", "6a: 2 decisions answered 200", false,
			[]string{`UPDATE idempotency_records SET status_code = 200 WHERE key = '` + late.Key + `'`}},
	})
}

// A key used again after its record expired moves money again, legitimately; within the TTL,
// that would be a scope moving money twice.
func TestReconcileTellsAKeysSecondUseFromADoublePosting(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	first := posting(a, b, 100)
	second := first
	second.TransferID = first.Scope.TransferID(1)
	// The first use two days ago, the second now: a day's TTL lies between them.
	if _, _, err := l.Post(ctx, first, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DB.Exec(ctx, `UPDATE transfers SET created_at = created_at - interval '2 days',
		completed_at = completed_at - interval '2 days' WHERE id = $1`, first.TransferID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Post(ctx, second, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	tx, err := l.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if got := broken(t, tx, ttl); len(got) != 0 {
		t.Fatalf("with a TTL shorter than the gap: broken %v", got)
	}
	report, err := ledger.Reconcile(ctx, tx, 3*ttl, nil)
	if err != nil || report.OK() {
		t.Fatalf("two uses within a TTL of three days went unnoticed (%v)", err)
	}
	var out strings.Builder
	report.Print(&out)
	if !strings.Contains(out.String(), "BROKEN  5.") || !strings.Contains(out.String(), second.TransferID) {
		t.Fatalf("report does not name the broken invariant and the transfer:\n%s", out.String())
	}
}

// A transfer pending for long is pointed out, without breaking an invariant.
func TestReconcilePointsOutStalePendingTransfers(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 100), account(t, "USD", 0)
	p := posting(a, b, 10)
	tx, err := l.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := ledger.InsertPending(ctx, tx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE transfers SET created_at = now() - interval '1 hour' WHERE id = $1`, p.TransferID); err != nil {
		t.Fatal(err)
	}
	report, err := ledger.Reconcile(ctx, tx, ttl, nil)
	if err != nil || !report.OK() || len(report.StalePending) != 1 || !strings.Contains(report.StalePending[0], p.TransferID) {
		t.Fatalf("ok %v, stale %v, err %v", report.OK(), report.StalePending, err)
	}
}

// Invariant 8 against a bank statement: a ledger behind the bank is a payout in flight for
// BankLagBound, then broken; a ledger ahead of the bank is broken at once.
func TestReconcileTellsAPayoutInFlightFromOneThatDisagreesWithTheBank(t *testing.T) {
	ctx := context.Background()
	acc := account(t, "USD", 100)
	tx, err := l.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	suffix := strings.TrimPrefix(acc, "acc_")
	recent, old, ahead := "po_recent_"+suffix, "po_old_"+suffix, "po_ahead_"+suffix
	var statement []bank.Payment
	for _, id := range []string{recent, old, ahead} {
		if _, err := ledger.InsertPayout(ctx, tx, ledger.Payout{ID: id, AccountID: acc, AmountMinor: 10, Currency: "USD",
			Destination: bank.Destination{AccountNumber: "000123456789", BankCode: "021000021"}, WorkflowID: "payout/own_x/" + id}, 0); err != nil {
			t.Fatal(err)
		}
		st := bank.Paid
		if id == ahead {
			st = bank.Pending
		}
		statement = append(statement, bank.Payment{ID: "pay_" + id, Reference: id, AmountMinor: 10, Currency: "USD", Status: st})
	}
	for _, sql := range []string{
		`UPDATE payouts SET created_at = now() - interval '3 hours' WHERE id = '` + old + `'`,
		`UPDATE payouts SET status = 'paid', paid_at = now(), bank_payment_id = 'pay_` + ahead + `' WHERE id = '` + ahead + `'`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	report, err := ledger.Reconcile(ctx, tx, ttl, statement)
	if err != nil {
		t.Fatal(err)
	}
	mentions := func(lines []string, id string) bool {
		return slices.ContainsFunc(lines, func(s string) bool { return strings.Contains(s, id+" ") || strings.Contains(s, id+":") })
	}
	var broken8 []string
	for _, c := range report.Checks {
		if c.ID == "8" {
			broken8 = c.Violations
		}
	}
	if !mentions(report.BankInFlight, recent) || mentions(broken8, recent) {
		t.Errorf("a payout paid at the bank a moment ago: in flight %v, broken %v", report.BankInFlight, broken8)
	}
	if mentions(report.BankInFlight, old) || !mentions(broken8, old) {
		t.Errorf("a payout the ledger has not heard of for 3 hours: in flight %v, broken %v", report.BankInFlight, broken8)
	}
	if mentions(report.BankInFlight, ahead) || !mentions(broken8, ahead) {
		t.Errorf("a payout paid in the ledger, pending at the bank: in flight %v, broken %v", report.BankInFlight, broken8)
	}
}
