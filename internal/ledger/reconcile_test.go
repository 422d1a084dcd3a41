package ledger_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
)

// broken reconciles inside tx and returns the ids of the broken invariants.
func broken(t *testing.T, tx pgx.Tx, ttl time.Duration) []string {
	t.Helper()
	report, err := ledger.Reconcile(context.Background(), tx, ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range report.Checks {
		if len(c.Violations) > 0 {
			out = append(out, c.ID)
		}
	}
	return out
}

func has(ns []string, n string) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
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
	for _, c := range []struct {
		name      string
		invariant string
		only      bool // no other invariant breaks with it
		sql       []string
	}{
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
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := l.DB.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if got := broken(t, tx, ttl); len(got) != 0 {
				t.Fatalf("broken before breaking anything: %v", got)
			}
			for _, sql := range c.sql {
				if _, err := tx.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			got := broken(t, tx, ttl)
			if !has(got, c.invariant) || (c.only && len(got) != 1) {
				t.Fatalf("broken invariants %v, want %s", got, c.invariant)
			}
		})
	}
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
		if err := ledger.InsertPayout(ctx, tx, ledger.Payout{ID: id, AccountID: acc, AmountMinor: 10, Currency: "USD",
			Destination: bank.Destination{AccountNumber: "000123456789", BankCode: "021000021"}, WorkflowID: "payout/own_x/" + id}); err != nil {
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
