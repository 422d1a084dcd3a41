package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/transfer"
)

// Check is one ledger invariant and what breaks it.
type Check struct {
	ID         string // "1" to "5" as docs/ledger.md numbers them; "5a", "5b" refine the fifth
	Invariant  string
	Violations []string // one line each, at most maxViolations
	More       int      // violations beyond those listed
}

// Report is the outcome of Reconcile.
type Report struct {
	Accounts, Transfers, Entries int64
	ByStatus                     map[transfer.Status]int64
	Checks                       []Check
	// StalePending are transfers pending for more than PendingBound: not a broken invariant (no
	// money moved), but a sign that the recovery Schedule is not running, or that a run has been
	// held open for that long (a posting waiting on a lock, no worker polling): worth a look in
	// the Temporal UI.
	StalePending []string
}

// PendingBound is how long a transfer may stay pending: the recovery Schedule resolves any
// claim older than workflows.StaleAfter every workflows.RecoveryEvery, which add up to this.
const PendingBound = 15 * time.Minute

// OK is true when every invariant holds.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if len(c.Violations) > 0 {
			return false
		}
	}
	return true
}

const maxViolations = 20

// Reconcile checks every ledger invariant (docs/contract.md §4, and 5a, 5b of docs/ledger.md) against the database. ttl is the shortest
// PAYMENTS_IDEMPOTENCY_TTL the ledger was written with: a key's second use that moved money
// sooner than that after the first is a scope that moved money twice.
func Reconcile(ctx context.Context, q database.Querier, ttl time.Duration) (Report, error) {
	var r Report
	err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM transfers),
		(SELECT count(*) FROM entries)`).Scan(&r.Accounts, &r.Transfers, &r.Entries)
	if err != nil {
		return r, err
	}
	rows, _ := q.Query(ctx, `SELECT status, count(*) FROM transfers GROUP BY status`)
	r.ByStatus = map[transfer.Status]int64{}
	var status transfer.Status
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { r.ByStatus[status] = n; return nil }); err != nil {
		return r, err
	}
	if r.StalePending, err = lines(ctx, q, `
		SELECT format('transfer %s (%s) pending since %s', id, workflow_id, created_at)
		FROM transfers WHERE status = 'pending' AND created_at < now() - $1::interval
		ORDER BY created_at LIMIT 20`, PendingBound); err != nil {
		return r, err
	}
	for _, c := range []struct {
		id, invariant string
		find          func(context.Context, database.Querier) ([]string, error)
	}{
		{"1", "each completed transfer has exactly two entries, -amount on the source and +amount on the destination, in its currency; other transfers have none", entriesMatchTransfers},
		{"2", "each account's balance equals the sum of its entries, and each entry's balance_after_minor the running sum", balancesMatchEntries},
		{"3", "per currency, all balances (funding accounts included) sum to zero", currenciesSumToZero},
		{"4", "no customer account is or ever was negative", customersNeverNegative},
		{"5", "no transfer id, and no idempotency scope, has moved money twice", func(ctx context.Context, q database.Querier) ([]string, error) {
			return movedOnce(ctx, q, ttl)
		}},
		{"5a", "money leaves a customer account only at its owner's request, and funding accounts only for deposits", movedByItsOwner},
		{"5b", "every stored answer agrees with what its operation did", answersAgree},
	} {
		found, err := c.find(ctx, q)
		if err != nil {
			return r, fmt.Errorf("checking %q: %w", c.invariant, err)
		}
		check := Check{ID: c.id, Invariant: c.invariant, Violations: found}
		if len(found) > maxViolations {
			check.Violations, check.More = found[:maxViolations], len(found)-maxViolations
		}
		r.Checks = append(r.Checks, check)
	}
	return r, nil
}

// lines runs sql, whose rows are one text column each: a violation described.
func lines(ctx context.Context, q database.Querier, sql string, args ...any) ([]string, error) {
	rows, _ := q.Query(ctx, sql, args...)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func entriesMatchTransfers(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('transfer %s (%s, %s %s from %s to %s): entries %s', t.id, t.status, t.amount_minor,
			t.currency, t.from_account_id, t.to_account_id,
			COALESCE(string_agg(format('%s %s %s', e.account_id, e.amount_minor, a.currency), ', '), 'none'))
		FROM transfers t
		LEFT JOIN entries e ON e.transfer_id = t.id
		LEFT JOIN accounts a ON a.id = e.account_id
		GROUP BY t.id
		HAVING CASE WHEN t.status = 'completed' THEN
			count(e.id) <> 2
			OR count(*) FILTER (WHERE e.account_id = t.from_account_id AND e.amount_minor = -t.amount_minor) <> 1
			OR count(*) FILTER (WHERE e.account_id = t.to_account_id AND e.amount_minor = t.amount_minor) <> 1
			OR bool_or(a.currency <> t.currency)
		ELSE count(e.id) <> 0 END
		UNION ALL
		SELECT format('entry %s names transfer %s, which does not exist', e.id, e.transfer_id)
		FROM entries e WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.id = e.transfer_id)`)
}

func balancesMatchEntries(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('account %s: balance %s, entries sum to %s', a.id, a.balance_minor, COALESCE(sum(e.amount_minor), 0))
		FROM accounts a LEFT JOIN entries e ON e.account_id = a.id
		GROUP BY a.id
		HAVING a.balance_minor <> COALESCE(sum(e.amount_minor), 0)
		UNION ALL
		SELECT format('account %s: entry %s says balance %s after it, the running sum is %s',
			account_id, id, balance_after_minor, running)
		FROM (SELECT account_id, id, balance_after_minor,
			sum(amount_minor) OVER (PARTITION BY account_id ORDER BY id) AS running FROM entries) x
		WHERE balance_after_minor <> running`)
}

func currenciesSumToZero(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('%s: balances sum to %s', currency, sum(balance_minor))
		FROM accounts GROUP BY currency HAVING sum(balance_minor) <> 0`)
}

func customersNeverNegative(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('account %s: balance %s', id, balance_minor)
		FROM accounts WHERE kind = 'customer' AND balance_minor < 0
		UNION ALL
		SELECT format('account %s: balance %s after entry %s', e.account_id, e.balance_after_minor, e.id)
		FROM entries e JOIN accounts a ON a.id = e.account_id
		WHERE a.kind = 'customer' AND e.balance_after_minor < 0`)
}

// movedOnce finds transfer ids with more than one debit or credit, transfers that no idempotency
// scope accounts for, and scopes whose key moved money twice within its replay window. A
// scope's transfers are TransferID(scope, 0), (scope, 1), …, one per use of the key.
func movedOnce(ctx context.Context, q database.Querier, ttl time.Duration) ([]string, error) {
	found, err := lines(ctx, q, `
		SELECT format('transfer %s has %s debits and %s credits', transfer_id,
			count(*) FILTER (WHERE amount_minor < 0), count(*) FILTER (WHERE amount_minor > 0))
		FROM entries GROUP BY transfer_id
		HAVING count(*) FILTER (WHERE amount_minor < 0) > 1 OR count(*) FILTER (WHERE amount_minor > 0) > 1`)
	if err != nil {
		return nil, err
	}
	rows, _ := q.Query(ctx, `
		SELECT workflow_id, array_agg(id ORDER BY created_at), array_agg(status ORDER BY created_at),
			array_agg(created_at ORDER BY created_at), array_agg(completed_at ORDER BY created_at)
		FROM transfers GROUP BY workflow_id`)
	var (
		workflowID string
		ids        []string
		statuses   []string
		created    []time.Time
		completed  []*time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&workflowID, &ids, &statuses, &created, &completed}, func() error {
		found = append(found, scopeViolations(workflowID, ids, statuses, created, completed, ttl)...)
		return nil
	})
	return found, err
}

func scopeViolations(workflowID string, ids, statuses []string, created []time.Time, completed []*time.Time, ttl time.Duration) []string {
	scope, ok := idempotency.ScopeOf(workflowID)
	if !ok {
		return []string{fmt.Sprintf("transfers %v: workflow ID %q belongs to no idempotency scope", ids, workflowID)}
	}
	var found []string
	uses := map[string]bool{}
	for use := range ids {
		uses[scope.TransferID(use)] = true
	}
	var lastMoved *time.Time
	for i, id := range ids {
		if !uses[id] {
			found = append(found, fmt.Sprintf("transfer %s under %s is none of the scope's %d uses", id, workflowID, len(ids)))
		}
		if statuses[i] != string(transfer.Completed) {
			continue
		}
		if lastMoved != nil && created[i].Before(lastMoved.Add(ttl)) {
			found = append(found, fmt.Sprintf("scope %s moved money again (transfer %s) within %s of its previous use", workflowID, id, ttl))
		}
		lastMoved = &created[i]
		if completed[i] != nil {
			lastMoved = completed[i]
		}
	}
	return found
}

// movedByItsOwner finds completed transfers that no request of the right owner accounts for: a
// customer account debited under another owner's scope or outside POST /v1/transfers, a funding
// account debited other than by a deposit into its owner's customer account, or a funding
// account credited at all. The API refuses all of these; one here means money was created or
// taken without its owner's say.
func movedByItsOwner(ctx context.Context, q database.Querier) ([]string, error) {
	rows, _ := q.Query(ctx, `
		SELECT t.id, t.workflow_id, f.kind, f.owner_id, d.kind, d.owner_id
		FROM transfers t
		JOIN accounts f ON f.id = t.from_account_id
		JOIN accounts d ON d.id = t.to_account_id
		WHERE t.status = 'completed'`)
	var found []string
	var id, workflowID, fromKind, fromOwner, toKind, toOwner string
	_, err := pgx.ForEachRow(rows, []any{&id, &workflowID, &fromKind, &fromOwner, &toKind, &toOwner}, func() error {
		scope, ok := idempotency.ScopeOf(workflowID)
		if !ok {
			return nil // invariant 5 reports it
		}
		var why string
		switch {
		case toKind != KindCustomer:
			why = "credits a funding account"
		case fromKind == KindCustomer && (scope.Route != idempotency.RouteTransfers || scope.OwnerID != fromOwner):
			why = "debits a customer account of " + fromOwner
		case fromKind != KindCustomer && (scope.Route != idempotency.RouteDeposit || scope.OwnerID != toOwner):
			why = "debits a funding account without being a deposit into its owner's account"
		default:
			return nil
		}
		found = append(found, fmt.Sprintf("transfer %s under %s %s", id, workflowID, why))
		return nil
	})
	return found, err
}

// answersAgree finds stored answers that say something else than the ledger: a 201 for a
// transfer that did not complete, a 422 insufficient-funds for one not rejected, an answer
// naming another transfer or account than its record's.
func answersAgree(ctx context.Context, q database.Querier) ([]string, error) {
	rows, _ := q.Query(ctx, `
		SELECT r.route || ' ' || r.key || ' of ' || r.owner_id, r.resource_id, r.status_code, r.body,
			COALESCE(t.status, CASE WHEN a.id IS NOT NULL THEN 'open' END, 'missing')
		FROM idempotency_records r
		LEFT JOIN transfers t ON t.id = r.resource_id
		LEFT JOIN accounts a ON a.id = r.resource_id
		WHERE r.status_code IS NOT NULL`)
	var found []string
	var scope, resource, state string
	var code int
	var body []byte
	_, err := pgx.ForEachRow(rows, []any{&scope, &resource, &code, &body, &state}, func() error {
		var answer struct {
			ID         string `json:"id"`
			Status     string `json:"status"`
			TransferID string `json:"transfer_id"`
			Type       string `json:"type"`
		}
		_ = json.Unmarshal(body, &answer)
		var ok bool
		switch code {
		case 201: // created: the account, or the completed transfer
			ok = answer.ID == resource && (state == "open" || state == string(transfer.Completed) && answer.Status == state)
		case 422: // insufficient funds: the rejected transfer
			ok = state == string(transfer.Rejected) && answer.TransferID == resource && strings.HasSuffix(answer.Type, "/insufficient-funds")
		}
		if !ok {
			found = append(found, fmt.Sprintf("%s answers %d %s, but %s is %s", scope, code, body, resource, state))
		}
		return nil
	})
	return found, err
}

// Print writes the report for a person to read.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "Ledger: %d accounts, %d transfers (%d completed, %d rejected, %d failed, %d pending), %d entries\n",
		r.Accounts, r.Transfers, r.ByStatus[transfer.Completed], r.ByStatus[transfer.Rejected], r.ByStatus[transfer.Failed],
		r.ByStatus[transfer.Pending], r.Entries)
	broken := 0
	for _, c := range r.Checks {
		if len(c.Violations) == 0 {
			fmt.Fprintf(w, "  ok      %-3s %s\n", c.ID+".", c.Invariant)
			continue
		}
		broken++
		fmt.Fprintf(w, "  BROKEN  %-3s %s\n", c.ID+".", c.Invariant)
		for _, v := range c.Violations {
			fmt.Fprintf(w, "            %s\n", v)
		}
		if c.More > 0 {
			fmt.Fprintf(w, "            … and %d more\n", c.More)
		}
	}
	if len(r.StalePending) > 0 {
		fmt.Fprintf(w, "  note    transfers pending for more than %s (no money moved; is the %s Schedule running?):\n", PendingBound, "transfer-recovery")
		for _, v := range r.StalePending {
			fmt.Fprintf(w, "            %s\n", v)
		}
	}
	if broken == 0 {
		fmt.Fprintf(w, "All %d invariants hold.\n", len(r.Checks))
	} else {
		fmt.Fprintf(w, "%d of %d invariants broken.\n", broken, len(r.Checks))
	}
}
