package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Check is one ledger invariant and what breaks it.
type Check struct {
	ID         string // "1" to "9" as docs/ledger.md numbers them; "5a" to "5c" refine the fifth
	Invariant  string
	Violations []string // one line each, at most maxViolations
	More       int      // violations beyond those listed
	Unchecked  string   // why the invariant could not be checked, if it could not; it is not counted as holding
}

// Report is the outcome of Reconcile.
type Report struct {
	Accounts, Transfers, Entries int64
	ByStatus                     map[TransferStatus]int64
	Checks                       []Check
	// StalePending are transfers pending for more than PendingBound: not a broken invariant (no
	// money moved), but a sign that the recovery Schedule is not running, or that a run has been
	// held open for that long (a posting waiting on a lock, no worker polling): worth a look in
	// the Temporal UI.
	StalePending []string
	// BankInFlight are payouts on which the ledger is behind the bank for less than
	// BankLagBound: outcomes on their way (a callback delayed or dropped, the run not yet asking).
	BankInFlight []string
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

// Reconcile checks every ledger invariant (docs/contract.md §4 and §6, and 5a to 5c of
// docs/ledger.md) against the database. ttl is the shortest PAYMENTS_IDEMPOTENCY_TTL the ledger
// was written with: a key's second use that moved money sooner than that after the first is a
// scope that moved money twice. statement is the bank's list of payments, which invariant 8
// holds the payouts to; nil when the bank could not be asked (the report says so).
func Reconcile(ctx context.Context, q database.Querier, ttl time.Duration, statement []bank.Payment) (Report, error) {
	var r Report
	err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM transfers),
		(SELECT count(*) FROM entries)`).Scan(&r.Accounts, &r.Transfers, &r.Entries)
	if err != nil {
		return r, err
	}
	rows, _ := q.Query(ctx, `SELECT status, count(*) FROM transfers GROUP BY status`)
	r.ByStatus = map[TransferStatus]int64{}
	var status TransferStatus
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
	noStatement := ""
	if statement == nil {
		noStatement = "the bank's statement could not be read"
	}
	for _, c := range []struct {
		id, invariant string
		find          func(context.Context, database.Querier) ([]string, error)
		unchecked     string // why find cannot run now, if it cannot
	}{
		{"1", "each completed transfer has exactly two entries, -amount on the source and +amount on the destination, in its currency; other transfers have none", entriesMatchTransfers, ""},
		{"2", "each account's balance equals the sum of its entries, and each entry's balance_after_minor the running sum", balancesMatchEntries, ""},
		{"3", "per currency, all balances (funding accounts included) sum to zero", currenciesSumToZero, ""},
		{"4", "no customer account is or ever was negative", customersNeverNegative, ""},
		{"5", "no transfer id, and no idempotency scope, has moved money twice", func(ctx context.Context, q database.Querier) ([]string, error) {
			return movedOnce(ctx, q, ttl)
		}, ""},
		{"5a", "money leaves a customer account only at its owner's request, and funding accounts only for deposits", movedByItsOwner, ""},
		{"5b", "every stored answer agrees with what its operation did", answersAgree, ""},
		{"5c", "every payin credited moved its money once, into the account its number names", payinsMovedOnce, ""},
		{"6", "every payout's hold ends exactly once, posted or released; open payout holds belong to processing payouts only; a payout's postings are what its status says", holdsEndOnce, ""},
		{"6a", "a payout that waits for approval goes to the bank only once approved, is decided once by another key than its creator, and every answer to an approval or a rejection agrees with it", approvalsDecidedOnce, ""},
		{"7", "available_minor >= 0 for every customer account, and its held_minor is the sum of its open holds", availableNeverNegative, ""},
		{"8", "each payout has at most one bank payment, and the ledger's view of it agrees with the bank's", func(ctx context.Context, q database.Querier) ([]string, error) {
			found, inFlight, err := agreesWithBank(ctx, q, statement)
			r.BankInFlight = inFlight
			return found, err
		}, noStatement},
		{"9", "every change of a transfer, payout, payin, refund, authorization or scheduled transfer has its one event, and every event is a change that committed", eventsMatchChanges, ""},
		{"10", "each refund gives back money its transfer moved, in reverse, and a transfer's amount_refunded_minor is the sum of its completed refunds, never more than its amount", refundsWithinTransfers, ""},
		{"11", "every authorization's hold ends exactly once (captured, voided or expired), a capture moves at most what was authorized, once, and every answer about an authorization agrees with it", authorizationsEndOnce, ""},
		{"12", "every occurrence of a scheduled transfer is at most one transfer, of the schedule's accounts and amount, among those started (never more than its count, none after it was cancelled), and every answer about a scheduled transfer agrees with it", occurrencesOnce, ""},
	} {
		if c.unchecked != "" {
			r.Checks = append(r.Checks, Check{ID: c.id, Invariant: c.invariant, Unchecked: c.unchecked})
			continue
		}
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
		FROM transfers WHERE kind IN ('transfer', 'refund') GROUP BY workflow_id`)
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
	idOf := scope.TransferID
	if scope.Route == idempotency.RouteRefunds {
		idOf = scope.RefundID
	}
	uses := map[string]bool{}
	for use := range ids {
		uses[idOf(use)] = true
	}
	var lastMoved *time.Time
	for i, id := range ids {
		// A key too long for the workflow ID is not in it whole: its transfers' ids cannot be
		// derived again here, and only the timing of their uses is checked.
		if scope.Key != "" && !uses[id] {
			found = append(found, fmt.Sprintf("transfer %s under %s is none of the scope's %d uses", id, workflowID, len(ids)))
		}
		if statuses[i] != string(TransferCompleted) {
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

// movedByItsOwner finds completed postings that no request of the right owner accounts for: a
// customer account debited other than by a transfer under its owner's POST /v1/transfers scope
// or a payout of that account under its owner's POST /v1/payouts scope; a funding account
// debited other than by a deposit into its owner's customer account, or credited at all; a
// settlement account credited other than by a payout, or debited other than by a payin or a
// return. The API refuses all of these; one here means money was created or taken without its
// owner's say.
func movedByItsOwner(ctx context.Context, q database.Querier) ([]string, error) {
	rows, _ := q.Query(ctx, `
		SELECT t.id, t.kind, t.workflow_id, f.kind, f.owner_id, d.kind, d.owner_id
		FROM transfers t
		JOIN accounts f ON f.id = t.from_account_id
		JOIN accounts d ON d.id = t.to_account_id
		WHERE t.status = 'completed'`)
	var found []string
	var id, kind, workflowID, fromKind, fromOwner, toKind, toOwner string
	_, err := pgx.ForEachRow(rows, []any{&id, &kind, &workflowID, &fromKind, &fromOwner, &toKind, &toOwner}, func() error {
		scope, ok := idempotency.ScopeOf(workflowID)
		if !ok {
			return nil // invariant 5 reports it
		}
		if why := unauthorized(kind, scope, fromKind, fromOwner, toKind, toOwner); why != "" {
			found = append(found, fmt.Sprintf("%s %s under %s %s", kind, id, workflowID, why))
		}
		return nil
	})
	return found, err
}

// unauthorized says what is wrong with a posting of kind under scope between accounts of these
// kinds and owners, or "".
func unauthorized(kind string, scope idempotency.Scope, fromKind, fromOwner, toKind, toOwner string) string {
	ownRequest := func(route, owner string) bool { return scope.Route == route && scope.OwnerID == owner }
	switch {
	case kind == KindTransfer && fromKind == KindCustomer && toKind == KindCustomer && ownRequest(idempotency.RouteTransfers, fromOwner):
	case kind == KindTransfer && fromKind == KindFunding && toKind == KindCustomer && ownRequest(idempotency.RouteDeposit, toOwner):
	case kind == KindPayout && fromKind == KindCustomer && toKind == KindSettlement && ownRequest(idempotency.RoutePayouts, fromOwner):
	case kind == KindReturn && fromKind == KindSettlement && toKind == KindCustomer && ownRequest(idempotency.RoutePayouts, toOwner):
	case kind == KindPayin && fromKind == KindSettlement && toKind == KindCustomer && scope.Route == idempotency.RoutePayin:
	case kind == KindRefund && fromKind == KindCustomer && toKind == KindCustomer && ownRequest(idempotency.RouteRefunds, fromOwner):
	case kind == KindCapture && fromKind == KindCustomer && toKind == KindCustomer && ownRequest(idempotency.RouteAuthorizations, fromOwner):
	case kind == KindTransfer && fromKind == KindCustomer && toKind == KindCustomer && ownRequest(idempotency.RouteOccurrence, fromOwner):
	default:
		return fmt.Sprintf("moves money from a %s account of %s to a %s account of %s", fromKind, fromOwner, toKind, toOwner)
	}
	return ""
}

// answersAgree finds stored answers that say something else than the ledger: a 201 for a
// transfer that did not complete, or a payout that is not the one held; a 422
// insufficient-funds for a transfer not rejected, or a payout not refused; an answer naming
// another transfer, payout or account than its record's.
func answersAgree(ctx context.Context, q database.Querier) ([]string, error) {
	rows, _ := q.Query(ctx, `
		SELECT r.route || ' ' || r.key || ' of ' || r.owner_id, r.route, r.resource_id, r.status_code, r.body, r.body_key IS NOT NULL,
			COALESCE(t.failure_reason, ''),
			COALESCE(t.status, p.status || CASE WHEN p.failure_reason = $1 THEN ' (insufficient funds)' ELSE '' END,
				CASE WHEN a.id IS NOT NULL OR w.id IS NOT NULL THEN 'open' END, 'missing')
		FROM idempotency_records r
		LEFT JOIN transfers t ON t.id = r.resource_id
		LEFT JOIN payouts p ON p.id = r.resource_id
		LEFT JOIN accounts a ON a.id = r.resource_id
		LEFT JOIN webhook_endpoints w ON w.id = r.resource_id
		WHERE r.status_code IS NOT NULL AND r.route <> ALL($2)`, ReasonInsufficientFunds, slices.Concat(authorizationRoutes, approvalRoutes, scheduledRoutes))
	var found []string
	var scope, route, resource, reason, state string
	var code int
	var body []byte
	var sealed bool
	_, err := pgx.ForEachRow(rows, []any{&scope, &route, &resource, &code, &body, &sealed, &reason, &state}, func() error {
		if sealed { // a webhook endpoint's answer, which shows its secret: its endpoint must exist
			if code != 201 || state != "open" {
				found = append(found, fmt.Sprintf("%s answers %d (sealed), but %s is %s", scope, code, resource, state))
			}
			return nil
		}
		var answer struct {
			ID         string `json:"id"`
			Status     string `json:"status"`
			TransferID string `json:"transfer_id"`
			PayoutID   string `json:"payout_id"`
			RefundID   string `json:"refund_id"`
			Type       string `json:"type"`
		}
		_ = json.Unmarshal(body, &answer)
		named, refusal := answer.TransferID, "/insufficient-funds"
		switch route {
		case idempotency.RoutePayouts:
			named = answer.PayoutID
		case idempotency.RouteRefunds:
			named, refusal = answer.RefundID, refundRefusals[reason]
		}
		var ok bool
		switch code {
		case 201: // created: the account or webhook endpoint; the transfer, completed; the payout, processing then
			ok = answer.ID == resource && (state == "open" || state == string(TransferCompleted) && answer.Status == state ||
				route == idempotency.RoutePayouts && (answer.Status == string(PayoutProcessing) || answer.Status == string(PayoutPendingApproval)) &&
					state != "missing" && !strings.Contains(state, "insufficient"))
		case 422: // insufficient funds: the transfer rejected, the payout refused; a refund refused for its reason
			ok = named == resource && refusal != "" && strings.HasSuffix(answer.Type, refusal) &&
				(state == string(TransferRejected) || state == "failed (insufficient funds)")
		}
		if !ok {
			found = append(found, fmt.Sprintf("%s answers %d %s, but %s is %s", scope, code, body, resource, state))
		}
		return nil
	})
	return found, err
}

// refundRefusals are the problem types of a refund's 422 by the refund's failure_reason.
var refundRefusals = map[string]string{
	ReasonInsufficientFunds: "/insufficient-funds",
	ReasonRefundExceeds:     "/refund-exceeds-transfer",
	ReasonNotRefundable:     "/transfer-not-refundable",
}

// payinsMovedOnce finds payins whose money did not move as they say: a credited payin without
// its posting, or with one that is not of its amount into its account; an unmatched one with a
// posting; a payin posting of no payin.
func payinsMovedOnce(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('payin %s (%s, %s %s for %s): posting %s', p.id, p.status, p.amount_minor, p.currency,
			p.account_number, COALESCE(format('%s %s %s to %s', t.status, t.amount_minor, t.currency, t.to_account_id), 'none'))
		FROM payins p LEFT JOIN transfers t ON t.id = p.id
		WHERE CASE WHEN p.status = 'credited' THEN
			t.id IS NULL OR t.kind <> 'payin' OR t.status <> 'completed' OR t.amount_minor <> p.amount_minor
			OR t.currency <> p.currency OR t.to_account_id IS DISTINCT FROM p.account_id
		ELSE t.id IS NOT NULL END
		UNION ALL
		SELECT format('payin posting %s (%s) has no payin', t.id, t.workflow_id)
		FROM transfers t WHERE t.kind = 'payin' AND NOT EXISTS (SELECT 1 FROM payins p WHERE p.id = t.id)`)
}

// holdsEndOnce finds holds and payouts that disagree: an open hold of a payout not processing,
// a posted hold of a payout not paid or returned, a released hold of a payout not failed; a
// paid or returned payout without its completed posting (of its amount, from its account to the
// settlement account), a returned one without its return posting, a payout with postings its
// status does not have; a posting of a payout that does not exist.
func holdsEndOnce(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('payout %s (%s): hold %s', p.id, p.status, COALESCE(h.status, 'none'))
		FROM payouts p LEFT JOIN holds h ON h.payout_id = p.id
		WHERE CASE p.status
			WHEN 'processing' THEN h.status IS DISTINCT FROM 'open' AND h.status IS NOT NULL
			WHEN 'pending_approval' THEN h.status IS DISTINCT FROM 'open'
			WHEN 'failed' THEN h.status IS NOT NULL AND h.status <> 'released'
			ELSE h.status IS DISTINCT FROM 'posted' END
			OR h.amount_minor <> p.amount_minor OR h.account_id <> p.account_id
		UNION ALL
		SELECT format('payout %s (%s %s %s): postings %s', p.id, p.status, p.amount_minor, p.currency,
			COALESCE(string_agg(format('%s %s %s %s->%s', t.kind, t.status, t.amount_minor, t.from_account_id, t.to_account_id), ', '), 'none'))
		FROM payouts p LEFT JOIN transfers t ON t.id IN (p.id, 'rt_' || substr(p.id, 4))
		GROUP BY p.id
		HAVING count(*) FILTER (WHERE t.kind = 'payout' AND t.status = 'completed' AND t.amount_minor = p.amount_minor
				AND t.from_account_id = p.account_id AND t.to_account_id = 'acc_settlement_' || lower(p.currency))
			<> CASE WHEN p.status IN ('paid', 'returned') THEN 1 ELSE 0 END
			OR count(*) FILTER (WHERE t.kind = 'return' AND t.status = 'completed' AND t.amount_minor = p.amount_minor
				AND t.to_account_id = p.account_id AND t.from_account_id = 'acc_settlement_' || lower(p.currency))
			<> CASE WHEN p.status = 'returned' THEN 1 ELSE 0 END
			OR count(t.id) <> CASE p.status WHEN 'paid' THEN 1 WHEN 'returned' THEN 2 ELSE 0 END
		UNION ALL
		SELECT format('%s posting %s belongs to no payout', t.kind, t.id)
		FROM transfers t WHERE t.kind IN ('payout', 'return')
			AND NOT EXISTS (SELECT 1 FROM payouts p WHERE t.id IN (p.id, 'rt_' || substr(p.id, 4)))`)
}

// availableNeverNegative finds customer accounts holding more than they have, and accounts whose
// held_minor is not the sum of their open holds.
func availableNeverNegative(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('account %s: balance %s, held %s, open holds %s', a.id, a.balance_minor, a.held_minor,
			COALESCE(sum(h.amount_minor), 0))
		FROM accounts a LEFT JOIN holds h ON h.account_id = a.id AND h.status = 'open'
		GROUP BY a.id
		HAVING a.held_minor <> COALESCE(sum(h.amount_minor), 0)
			OR (a.kind = 'customer' AND a.balance_minor - a.held_minor < 0)`)
}

// BankLagBound is how long the ledger may lag behind the bank on a payout (the bank paid it,
// failed it or returned it, and the ledger has not heard yet: a callback delayed, dropped and
// not yet asked after) before the difference is a broken invariant rather than a payment in
// flight. A run asks the bank itself after PAYMENTS_BANK_POLL_AFTER, then at most every hour.
const BankLagBound = 2 * time.Hour

// agreesWithBank holds the payouts to the bank's statement: at most one bank payment per
// payout, the one the payout records; no bank payment of a payout that does not exist; and the
// same status on both sides (pending at the bank: processing here). A ledger behind the bank
// (processing while the bank has paid, paid while it has returned, a payment id not recorded
// yet) is in flight, a note, for BankLagBound; a ledger ahead of the bank, or contradicting it,
// is broken at once. Without a statement there is nothing to hold the ledger to: the report
// says the invariant was not checked (Check.Unchecked), and this is not run.
func agreesWithBank(ctx context.Context, q database.Querier, statement []bank.Payment) (found, inFlight []string, err error) {
	rows, _ := q.Query(ctx, `SELECT id, status, COALESCE(bank_payment_id, ''),
		COALESCE(paid_at, created_at) > now() - $1::interval FROM payouts`, BankLagBound)
	type row struct {
		status, payment string
		recent          bool // changed less than BankLagBound ago
	}
	payouts := map[string]row{}
	var id, status, payment string
	var recent bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &status, &payment, &recent}, func() error {
		payouts[id] = row{status, payment, recent}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	byReference := map[string][]bank.Payment{}
	for _, p := range statement {
		byReference[p.Reference] = append(byReference[p.Reference], p)
	}
	want := map[string]string{bank.Pending: "processing", bank.Paid: "paid", bank.Failed: "failed", bank.Returned: "returned"}
	behind := func(po row, bankStatus string) bool {
		return po.recent && (po.status == "processing" || po.status == "paid" && bankStatus == bank.Returned)
	}
	for ref, ps := range byReference {
		po, ok := payouts[ref]
		p := ps[0]
		switch {
		case len(ps) > 1:
			found = append(found, fmt.Sprintf("payout %s has %d bank payments", ref, len(ps)))
		case !ok:
			found = append(found, fmt.Sprintf("bank payment %s names payout %s, which does not exist", p.ID, ref))
		case po.payment == "" && behind(po, p.Status):
			inFlight = append(inFlight, fmt.Sprintf("payout %s: the bank made payment %s (%s), not recorded yet", ref, p.ID, p.Status))
		case po.payment != p.ID:
			found = append(found, fmt.Sprintf("payout %s records bank payment %q, the bank made %s", ref, po.payment, p.ID))
		case want[p.Status] == po.status:
		case behind(po, p.Status):
			inFlight = append(inFlight, fmt.Sprintf("payout %s is %s, its bank payment %s is %s: not heard yet", ref, po.status, p.ID, p.Status))
		default:
			found = append(found, fmt.Sprintf("payout %s is %s, its bank payment %s is %s", ref, po.status, p.ID, p.Status))
		}
	}
	for id, po := range payouts {
		if po.payment != "" && len(byReference[id]) == 0 {
			found = append(found, fmt.Sprintf("payout %s records bank payment %s, which the bank does not have", id, po.payment))
		}
	}
	slices.Sort(found)
	slices.Sort(inFlight)
	return found, inFlight, nil
}

// Print writes the report for a person to read.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "Ledger: %d accounts, %d transfers (%d completed, %d rejected, %d failed, %d pending), %d entries\n",
		r.Accounts, r.Transfers, r.ByStatus[TransferCompleted], r.ByStatus[TransferRejected], r.ByStatus[TransferFailed],
		r.ByStatus[TransferPending], r.Entries)
	broken, unchecked := 0, 0
	for _, c := range r.Checks {
		if c.Unchecked != "" {
			unchecked++
			fmt.Fprintf(w, "  -       %-3s %s (not checked: %s)\n", c.ID+".", c.Invariant, c.Unchecked)
			continue
		}
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
	if len(r.BankInFlight) > 0 {
		fmt.Fprintf(w, "  note    payouts whose bank outcome the ledger has not heard yet (in flight for less than %s):\n", BankLagBound)
		for _, v := range r.BankInFlight[:min(len(r.BankInFlight), maxViolations)] {
			fmt.Fprintf(w, "            %s\n", v)
		}
	}
	checked := len(r.Checks) - unchecked
	switch {
	case broken > 0:
		fmt.Fprintf(w, "%d of %d invariants checked broken.\n", broken, checked)
	case unchecked > 0:
		fmt.Fprintf(w, "All %d invariants checked hold; %d could not be checked.\n", checked, unchecked)
	default:
		fmt.Fprintf(w, "All %d invariants hold.\n", checked)
	}
}

// eventsMatchChanges finds the changes without their event (since events began) and the events
// of no committed change. A completed or rejected transfer may also have a transfer.failed
// event: a run gave up on it, and a later run of its workflow ID posted it.
func eventsMatchChanges(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		WITH since AS (SELECT min(at) AS at FROM events_start),
		expected(object_id, type, created_at) AS (
			SELECT id, 'transfer.' || status, created_at FROM transfers WHERE kind = 'transfer' AND status <> 'pending'
			UNION ALL SELECT p.id, 'payout.processing', p.created_at FROM payouts p JOIN holds h ON h.payout_id = p.id
				WHERE p.approval_due_at IS NULL OR p.approved_by IS NOT NULL
			UNION ALL SELECT p.id, 'payout.pending_approval', p.created_at FROM payouts p JOIN holds h ON h.payout_id = p.id
				WHERE p.approval_due_at IS NOT NULL
			UNION ALL SELECT id, 'payout.' || status, created_at FROM payouts WHERE status NOT IN ('processing', 'pending_approval')
			UNION ALL SELECT id, 'payout.paid', created_at FROM payouts WHERE status = 'returned'
			UNION ALL SELECT id, 'payin.received', created_at FROM payins WHERE status = 'credited'
			UNION ALL SELECT id, 'refund.completed', created_at FROM transfers WHERE kind = 'refund' AND status = 'completed'
			UNION ALL SELECT a.id, 'authorization.created', a.created_at FROM authorizations a JOIN holds h ON h.authorization_id = a.id
			UNION ALL SELECT id, 'authorization.' || status, created_at FROM authorizations WHERE status IN ('captured', 'voided', 'expired')
			UNION ALL SELECT id, 'scheduled_transfer.created', created_at FROM scheduled_transfers WHERE status IN ('active', 'completed')
			UNION ALL SELECT id, 'scheduled_transfer.' || status, created_at FROM scheduled_transfers WHERE status IN ('completed', 'cancelled')
		), allowed AS (
			SELECT object_id, type FROM expected
			UNION ALL SELECT id, 'scheduled_transfer.created' FROM scheduled_transfers WHERE status = 'cancelled'
			UNION ALL SELECT id, 'transfer.failed' FROM transfers WHERE kind = 'transfer' AND status IN ('completed', 'rejected')
		)
		SELECT format('%s has no %s event', x.object_id, x.type) FROM expected x, since
		WHERE x.created_at >= since.at
			AND NOT EXISTS (SELECT 1 FROM events e WHERE e.object_id = x.object_id AND e.type = x.type)
		UNION ALL
		SELECT format('event %s (%s of %s) is of no committed change', e.id, e.type, e.object_id) FROM events e
		WHERE NOT EXISTS (SELECT 1 FROM allowed a WHERE a.object_id = e.object_id AND a.type = e.type)
		UNION ALL
		SELECT format('event %s (%s of %s) is seen by no owner', e.id, e.type, e.object_id) FROM events e
		WHERE NOT EXISTS (SELECT 1 FROM event_owners o WHERE o.event_seq = e.seq)`)
}

// refundsWithinTransfers finds refunds that do not reverse their transfer (other accounts,
// currency or kind), completed refunds of a transfer that is not completed, and transfers whose amount_refunded_minor is not the sum of their completed
// refunds or is more than their amount.
func refundsWithinTransfers(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('refund %s (%s %s %s->%s) does not reverse transfer %s (%s %s %s %s->%s)', r.id, r.amount_minor,
			r.currency, r.from_account_id, r.to_account_id, t.id, t.kind, t.status, t.currency, t.from_account_id, t.to_account_id)
		FROM transfers r JOIN transfers t ON t.id = r.refund_of
		WHERE r.kind = 'refund' AND (t.kind <> 'transfer' OR (r.status = 'completed' AND t.status <> 'completed') OR r.currency <> t.currency
			OR r.from_account_id <> t.to_account_id OR r.to_account_id <> t.from_account_id)
		UNION ALL
		SELECT format('transfer %s (%s %s) shows %s refunded; its completed refunds sum to %s', t.id, t.amount_minor,
			t.currency, t.amount_refunded_minor, COALESCE(sum(r.amount_minor) FILTER (WHERE r.status = 'completed'), 0))
		FROM transfers t LEFT JOIN transfers r ON r.refund_of = t.id AND r.kind = 'refund'
		WHERE t.kind = 'transfer'
		GROUP BY t.id
		HAVING t.amount_refunded_minor <> COALESCE(sum(r.amount_minor) FILTER (WHERE r.status = 'completed'), 0)
			OR t.amount_refunded_minor > t.amount_minor`)
}

// approvalRoutes are the routes whose answers approvalsDecidedOnce checks.
var approvalRoutes = []string{idempotency.RouteApprove, idempotency.RouteReject}

// approvalsDecidedOnce finds payouts that needed approval and went on without it (paid,
// returned, sent to the bank, or processing with its money held, and approved by nobody), were
// decided and still wait, were rejected and did not fail, or were decided by the key that asked
// for them; and stored answers to approvals and rejections that say otherwise than the payout: a
// 200 whose approved_by or rejected_by is not the payout's (two decisions that both won show so),
// a 422 payout-not-pending-approval for one still waiting, any answer about a payout that does
// not exist.
func approvalsDecidedOnce(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('payout %s (%s): approved by %s, rejected by %s, bank payment %s', p.id, p.status,
			COALESCE(p.approved_by, 'nobody'), COALESCE(p.rejected_by, 'nobody'), COALESCE(p.bank_payment_id, 'none'))
		FROM payouts p WHERE p.approval_due_at IS NOT NULL AND (
			p.approved_by IS NULL AND (p.status IN ('paid', 'returned') OR p.bank_payment_id IS NOT NULL
				OR p.status = 'processing' AND EXISTS (SELECT 1 FROM holds h WHERE h.payout_id = p.id))
			OR p.status = 'pending_approval' AND (p.approved_by IS NOT NULL OR p.rejected_by IS NOT NULL)
			OR p.rejected_by IS NOT NULL AND p.status <> 'failed'
			OR p.created_by_key IN (p.approved_by, p.rejected_by))
		UNION ALL
		SELECT format('%s %s of %s answers %s, but %s is %s (approved by %s, rejected by %s)', r.route, r.key, r.owner_id,
			r.status_code, r.resource_id, COALESCE(p.status, 'missing'), COALESCE(p.approved_by, 'nobody'), COALESCE(p.rejected_by, 'nobody'))
		FROM idempotency_records r LEFT JOIN payouts p ON p.id = r.resource_id
		WHERE r.status_code IS NOT NULL AND r.route = ANY($1) AND NOT COALESCE(CASE
			WHEN r.status_code = 200 AND r.route = $2 THEN convert_from(r.body, 'UTF8')::jsonb->>'approved_by' = p.approved_by
			WHEN r.status_code = 200 THEN convert_from(r.body, 'UTF8')::jsonb->>'rejected_by' = p.rejected_by
			WHEN r.status_code = 422 THEN p.status <> 'pending_approval'
			ELSE false END, false)
		UNION ALL
		SELECT format('payout %s: %s decisions answered 200', r.resource_id, count(*))
		FROM idempotency_records r WHERE r.route = ANY($1) AND r.status_code = 200
		GROUP BY r.resource_id HAVING count(*) > 1`, approvalRoutes, idempotency.RouteApprove)
}

// authorizationRoutes are the routes whose answers authorizationsEndOnce checks (answersAgree
// checks the others).
var authorizationRoutes = []string{idempotency.RouteAuthorizations, idempotency.RouteCapture, idempotency.RouteVoid}

// authorizationsEndOnce finds authorizations whose hold, postings or answers disagree with their
// status: a hold open other than while authorized, posted other than when captured, released
// other than when voided or expired, of another amount or account, or any hold at all while
// pending or rejected; a capture's posting missing, of another amount than the one captured, or
// present without a capture; a capture posting of no authorization; and a stored answer that says
// otherwise (201 for one never held, 422 insufficient-funds for one held, 200 to a capture or a
// void that did not win or of another amount than the one captured, two decisions of one
// authorization that both answered 200, 422 authorization-not-pending for one still authorized,
// any answer about an authorization that does not exist).
func authorizationsEndOnce(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('authorization %s (%s): hold %s', a.id, a.status, COALESCE(h.status, 'none'))
		FROM authorizations a LEFT JOIN holds h ON h.authorization_id = a.id
		WHERE CASE a.status
			WHEN 'authorized' THEN h.status IS DISTINCT FROM 'open'
			WHEN 'captured' THEN h.status IS DISTINCT FROM 'posted'
			WHEN 'voided' THEN h.status IS DISTINCT FROM 'released'
			WHEN 'expired' THEN h.status IS DISTINCT FROM 'released'
			ELSE h.status IS NOT NULL END
			OR h.amount_minor <> a.amount_minor OR h.account_id <> a.from_account_id
		UNION ALL
		SELECT format('authorization %s (%s, %s captured of %s): capture %s', a.id, a.status, a.amount_captured_minor,
			a.amount_minor, COALESCE(format('%s %s %s->%s', t.status, t.amount_minor, t.from_account_id, t.to_account_id), 'none'))
		FROM authorizations a LEFT JOIN transfers t ON t.id = a.id AND t.kind = 'capture'
		WHERE a.amount_captured_minor > a.amount_minor OR CASE WHEN a.status = 'captured'
			THEN t.status IS DISTINCT FROM 'completed' OR t.amount_minor <> a.amount_captured_minor
				OR t.from_account_id <> a.from_account_id OR t.to_account_id <> a.to_account_id OR t.currency <> a.currency
			ELSE t.id IS NOT NULL END
		UNION ALL
		SELECT format('capture posting %s belongs to no authorization', t.id) FROM transfers t
		WHERE t.kind = 'capture' AND NOT EXISTS (SELECT 1 FROM authorizations a WHERE a.id = t.id)
		UNION ALL
		SELECT format('%s %s of %s answers %s, but %s is %s', r.route, r.key, r.owner_id, r.status_code, r.resource_id,
			COALESCE(a.status, 'missing'))
		FROM idempotency_records r LEFT JOIN authorizations a ON a.id = r.resource_id
		WHERE r.status_code IS NOT NULL AND r.route = ANY($1) AND NOT COALESCE(CASE
			WHEN r.route = $2 AND r.status_code = 201 THEN a.status IN ('authorized', 'captured', 'voided', 'expired')
			WHEN r.route = $2 AND r.status_code = 422 THEN a.status = 'rejected'
			WHEN r.status_code = 200 AND r.route = $3 THEN a.status = 'captured'
				AND (convert_from(r.body, 'UTF8')::jsonb->>'amount_captured_minor')::bigint = a.amount_captured_minor
			WHEN r.status_code = 200 THEN a.status = 'voided'
			WHEN r.status_code = 422 THEN a.status IN ('captured', 'voided', 'expired', 'rejected')
			ELSE false END, false)
		UNION ALL
		SELECT format('authorization %s: %s decisions answered 200', r.resource_id, count(*))
		FROM idempotency_records r WHERE r.route = ANY($4) AND r.status_code = 200
		GROUP BY r.resource_id HAVING count(*) > 1`, authorizationRoutes, idempotency.RouteAuthorizations, idempotency.RouteCapture,
		[]string{idempotency.RouteCapture, idempotency.RouteVoid})
}

// scheduledRoutes are the routes whose answers occurrencesOnce checks (answersAgree checks the
// occurrences' own, which are transfers').
var scheduledRoutes = []string{idempotency.RouteScheduledTransfers}

// occurrencesOnce finds occurrences that are not one transfer of their schedule's: two transfers
// of one occurrence, a transfer of an occurrence not started (beyond the schedule's count, or
// after its cancellation stopped it), of other accounts, amount or currency, not a transfer, or
// under another workflow ID than its occurrence's; a transfer under an occurrence's workflow ID
// that names no schedule; schedules whose status disagrees with their occurrences (completed
// before the last, active or pending after it); and a stored answer to a scheduled transfer's
// request other than a 201 naming it, activated.
func occurrencesOnce(ctx context.Context, q database.Querier) ([]string, error) {
	return lines(ctx, q, `
		SELECT format('occurrence %s of scheduled transfer %s has %s transfers', t.occurrence, t.scheduled_transfer_id, count(*))
		FROM transfers t WHERE t.scheduled_transfer_id IS NOT NULL
		GROUP BY t.scheduled_transfer_id, t.occurrence HAVING count(*) > 1
		UNION ALL
		SELECT format('transfer %s (%s %s %s %s->%s, %s) is occurrence %s of scheduled transfer %s (%s, %s of %s started: %s %s %s->%s)',
			t.id, t.kind, t.amount_minor, t.currency, t.from_account_id, t.to_account_id, t.workflow_id, t.occurrence, s.id, s.status,
			s.occurrences, COALESCE(s.count::text, CASE WHEN s.interval_ms = 0 THEN '1' ELSE 'unbounded' END), s.amount_minor,
			s.currency, s.from_account_id, s.to_account_id)
		FROM transfers t JOIN scheduled_transfers s ON s.id = t.scheduled_transfer_id
		WHERE t.occurrence < 1 OR t.occurrence > s.occurrences OR t.kind <> 'transfer' OR t.amount_minor <> s.amount_minor
			OR t.currency <> s.currency OR t.from_account_id <> s.from_account_id OR t.to_account_id <> s.to_account_id
			OR t.workflow_id <> format('occurrence/%s/%s/%s', s.owner_id, s.id, t.occurrence)
		UNION ALL
		SELECT format('transfer %s under %s names no scheduled transfer', t.id, t.workflow_id) FROM transfers t
		WHERE t.workflow_id LIKE 'occurrence/%' AND t.scheduled_transfer_id IS NULL
		UNION ALL
		SELECT format('scheduled transfer %s is %s after %s of %s occurrences', s.id, s.status, s.occurrences, l.n)
		FROM scheduled_transfers s CROSS JOIN LATERAL (SELECT COALESCE(s.count, CASE WHEN s.interval_ms = 0 THEN 1 END) AS n) l
		WHERE s.occurrences > l.n OR (s.status = 'completed') <> (s.occurrences = l.n AND s.status <> 'cancelled')
			OR (s.status = 'pending' AND s.occurrences > 0)
		UNION ALL
		SELECT format('%s %s of %s answers %s, but %s is %s', r.route, r.key, r.owner_id, r.status_code, r.resource_id,
			COALESCE(s.status, 'missing'))
		FROM idempotency_records r LEFT JOIN scheduled_transfers s ON s.id = r.resource_id
		WHERE r.status_code IS NOT NULL AND r.route = ANY($1) AND NOT COALESCE(r.status_code = 201
			AND convert_from(r.body, 'UTF8')::jsonb->>'id' = s.id AND s.status <> 'pending', false)`, scheduledRoutes)
}
