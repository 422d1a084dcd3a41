package ledger

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Check is one ledger invariant (spec §4) and what breaks it.
type Check struct {
	Number     int
	Invariant  string
	Violations []string // one line each, at most maxViolations
	More       int      // violations beyond those listed
}

// Report is the outcome of Reconcile.
type Report struct {
	Accounts, Transfers, Entries int64
	ByStatus                     map[string]int64
	Checks                       []Check
	// StalePending are transfers pending for more than StaleAfter: not a broken invariant (no
	// money moved), but a claim whose workflow never started or a posting that cannot finish,
	// worth a look in the Temporal UI.
	StalePending []string
}

// StaleAfter is how long a transfer may stay pending before the report points it out.
const StaleAfter = 15 * time.Minute

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

// Reconcile checks every ledger invariant of spec §4 against the database. ttl is the shortest
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
	r.ByStatus = map[string]int64{}
	var status string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { r.ByStatus[status] = n; return nil }); err != nil {
		return r, err
	}
	if r.StalePending, err = lines(ctx, q, `
		SELECT format('transfer %s (%s) pending since %s', id, workflow_id, created_at)
		FROM transfers WHERE status = 'pending' AND created_at < now() - $1::interval
		ORDER BY created_at LIMIT 20`, StaleAfter); err != nil {
		return r, err
	}
	for _, c := range []struct {
		invariant string
		find      func(context.Context, database.Querier) ([]string, error)
	}{
		{"each completed transfer has exactly two entries, -amount on the source and +amount on the destination, in its currency; other transfers have none", entriesMatchTransfers},
		{"each account's balance equals the sum of its entries, and each entry's balance_after_minor the running sum", balancesMatchEntries},
		{"per currency, all balances (funding accounts included) sum to zero", currenciesSumToZero},
		{"no customer account is or ever was negative", customersNeverNegative},
		{"no transfer id, and no idempotency scope, has moved money twice", func(ctx context.Context, q database.Querier) ([]string, error) {
			return movedOnce(ctx, q, ttl)
		}},
	} {
		found, err := c.find(ctx, q)
		if err != nil {
			return r, fmt.Errorf("checking %q: %w", c.invariant, err)
		}
		check := Check{Number: len(r.Checks) + 1, Invariant: c.invariant, Violations: found}
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
		if statuses[i] != StatusCompleted {
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

// Print writes the report for a person to read.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "Ledger: %d accounts, %d transfers (%d completed, %d rejected, %d failed, %d pending), %d entries\n",
		r.Accounts, r.Transfers, r.ByStatus[StatusCompleted], r.ByStatus[StatusRejected], r.ByStatus[StatusFailed],
		r.ByStatus[StatusPending], r.Entries)
	broken := 0
	for _, c := range r.Checks {
		if len(c.Violations) == 0 {
			fmt.Fprintf(w, "  ok      %d. %s\n", c.Number, c.Invariant)
			continue
		}
		broken++
		fmt.Fprintf(w, "  BROKEN  %d. %s\n", c.Number, c.Invariant)
		for _, v := range c.Violations {
			fmt.Fprintf(w, "            %s\n", v)
		}
		if c.More > 0 {
			fmt.Fprintf(w, "            … and %d more\n", c.More)
		}
	}
	if len(r.StalePending) > 0 {
		fmt.Fprintf(w, "  note    transfers pending for more than %s (no money moved; see their workflows):\n", StaleAfter)
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
