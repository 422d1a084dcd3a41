// Package ledger holds the double-entry ledger in PostgreSQL: owners' accounts, transfers, the
// entries that move money between them, and the transaction that posts a transfer exactly once.
package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	mathrand "math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/keyring"
)

// Kinds of account: a customer's; a currency's funding account (the ledger's own, the source
// of deposits, allowed to go negative); a currency's bank settlement account (the money that
// left or entered through the bank: credited by payouts, debited by payins and returns).
const (
	KindCustomer   = "customer"
	KindFunding    = "funding"
	KindSettlement = "settlement"
)

// Account is an account as the API shows it. BalanceMinor is the posted balance; AvailableMinor
// is that minus the account's open holds (HeldMinor), what a transfer or a payout may take.
type Account struct {
	ID             string    `json:"id"`
	Currency       string    `json:"currency"`
	Name           string    `json:"name"`
	AccountNumber  string    `json:"account_number"`
	BalanceMinor   int64     `json:"balance_minor"`
	AvailableMinor int64     `json:"available_minor"`
	Metadata       Metadata  `json:"metadata"`
	CreatedAt      time.Time `json:"created_at"`
	OwnerID        string    `json:"-"`
	Kind           string    `json:"-"`
	HeldMinor      int64     `json:"-"`
}

// Transfer is a transfer as the API shows it. The ledger's other postings (of payouts, payins,
// refunds) are rows of the same kind, which their own resources show.
type Transfer struct {
	ID                  string         `json:"id"`
	Status              TransferStatus `json:"status"`
	FromAccountID       string         `json:"from_account_id"`
	ToAccountID         string         `json:"to_account_id"`
	AmountMinor         int64          `json:"amount_minor"`
	AmountRefundedMinor int64          `json:"amount_refunded_minor"`
	Currency            string         `json:"currency"`
	Description         string         `json:"description"`
	Metadata            Metadata       `json:"metadata"`
	WorkflowID          string         `json:"workflow_id"`
	CreatedAt           time.Time      `json:"created_at"`
	CompletedAt         *time.Time     `json:"completed_at"`
	FailureReason       *string        `json:"failure_reason"`
	// An occurrence of a scheduled transfer names it and its number (from 1); other transfers
	// leave both out.
	ScheduledTransferID *string `json:"scheduled_transfer_id,omitempty"`
	Occurrence          *int    `json:"occurrence,omitempty"`
	Kind                string  `json:"-"` // KindTransfer, KindRefund, …
	RefundOf            *string `json:"-"` // a refund's transfer
}

// Metadata is a client's string map on an account, transfer, payout or refund, stored and shown
// as given; none is shown as {}.
type Metadata map[string]string

// MarshalJSON writes m, and {} for none.
func (m Metadata) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(map[string]string(m))
}

// stored is m as its jsonb column holds it: NULL for none.
func (m Metadata) stored() any {
	if len(m) == 0 {
		return nil
	}
	return map[string]string(m)
}

// ErrNotFound means the object does not exist or the caller may not see it.
var ErrNotFound = errors.New("not found")

// Ledger reads and writes the ledger tables.
type Ledger struct {
	DB *pgxpool.Pool
	// Keys (PAYMENTS_CODEC_KEYS) seal the secrets the ledger keeps: webhook endpoints' secrets
	// and the stored answers that show them (contract §10). Without them no endpoint is created.
	Keys *keyring.Ring
	// Wake, when not nil, is told after a commit which webhook endpoints got new deliveries, so
	// that their delivery workflows run now rather than at the next recovery pass.
	Wake func(endpointIDs []string)
	// noEvents leaves the events out of every change: the baseline of the benchmarks only.
	noEvents bool
}

// NewID returns a random identifier with prefix, e.g. "acc_…".
func NewID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails on supported platforms
	return prefix + hex.EncodeToString(b)
}

// UTC returns t in UTC truncated to microseconds, as PostgreSQL stores it, so that a value
// shown before and after a round trip through the database is the same.
func UTC(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// utcAll sets each of the times that is not nil to UTC (for the nullable times a row holds).
func utcAll(times ...**time.Time) {
	for _, t := range times {
		if *t != nil {
			u := UTC(**t)
			*t = &u
		}
	}
}

const accountColumns = `id, currency, name, balance_minor, created_at, owner_id, kind, held_minor, COALESCE(account_number, ''), metadata`

func scanAccount(row pgx.Row) (Account, error) {
	var a Account
	err := row.Scan(&a.ID, &a.Currency, &a.Name, &a.BalanceMinor, &a.CreatedAt, &a.OwnerID, &a.Kind, &a.HeldMinor, &a.AccountNumber, &a.Metadata)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, ErrNotFound
	}
	a.CreatedAt = UTC(a.CreatedAt)
	a.AvailableMinor = a.BalanceMinor - a.HeldMinor
	return a, err
}

// SettlementAccountID is the id of the bank settlement account of currency.
func SettlementAccountID(currency string) string {
	return "acc_settlement_" + strings.ToLower(currency)
}

const transferColumns = `id, status, from_account_id, to_account_id, amount_minor, currency, description,
	workflow_id, created_at, completed_at, failure_reason, amount_refunded_minor, metadata, kind, refund_of,
	scheduled_transfer_id, occurrence`

// scanTransfer reads a row of transferColumns, and of any extra columns after them into extra.
func scanTransfer(row pgx.Row, extra ...any) (Transfer, error) {
	var t Transfer
	err := row.Scan(append([]any{&t.ID, &t.Status, &t.FromAccountID, &t.ToAccountID, &t.AmountMinor, &t.Currency,
		&t.Description, &t.WorkflowID, &t.CreatedAt, &t.CompletedAt, &t.FailureReason, &t.AmountRefundedMinor,
		&t.Metadata, &t.Kind, &t.RefundOf, &t.ScheduledTransferID, &t.Occurrence}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrNotFound
	}
	t.CreatedAt = UTC(t.CreatedAt)
	if t.CompletedAt != nil {
		c := UTC(*t.CompletedAt)
		t.CompletedAt = &c
	}
	return t, err
}

// Account returns account id; when ownerID is not empty, only if that owner holds it.
func (l *Ledger) Account(ctx context.Context, ownerID, id string) (Account, error) {
	a, err := scanAccount(l.DB.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE id = $1`, id))
	if err == nil && ownerID != "" && a.OwnerID != ownerID {
		return Account{}, ErrNotFound
	}
	return a, err
}

// Accounts returns the two accounts of a transfer in one round trip: the source only if ownerID
// holds it (when ownerID is not empty), the destination whoever holds it.
func (l *Ledger) Accounts(ctx context.Context, ownerID, fromID, toID string) (from, to Account, err error) {
	rows, err := l.DB.Query(ctx, `SELECT `+accountColumns+` FROM accounts WHERE id = ANY($1)`, []string{fromID, toID})
	if err != nil {
		return from, to, err
	}
	defer rows.Close()
	found := 0
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return from, to, err
		}
		switch a.ID {
		case fromID:
			from, found = a, found|1
		case toID:
			to, found = a, found|2
		}
	}
	if err := rows.Err(); err != nil {
		return from, to, err
	}
	if found != 3 || (ownerID != "" && from.OwnerID != ownerID) {
		return Account{}, Account{}, ErrNotFound
	}
	return from, to, nil
}

// Transfer returns transfer id if ownerID holds either of its accounts (any owner when empty).
// The postings of payouts and payins are not transfers: their own resources show them.
func (l *Ledger) Transfer(ctx context.Context, ownerID, id string) (Transfer, error) {
	return l.posting(ctx, ownerID, id, KindTransfer)
}

// Requested returns transfer or refund id, whoever holds its accounts: the postings a client
// requests under a key of its own.
func (l *Ledger) Requested(ctx context.Context, id string) (Transfer, error) {
	return l.posting(ctx, "", id, KindTransfer, KindRefund)
}

// posting returns the posting id, of one of kinds, if ownerID holds either of its accounts
// (any owner when empty).
func (l *Ledger) posting(ctx context.Context, ownerID, id string, kinds ...string) (Transfer, error) {
	return scanTransfer(l.DB.QueryRow(ctx, `
		SELECT `+transferColumns+` FROM transfers t
		WHERE id = $1 AND kind = ANY($3) AND ($2 = '' OR EXISTS (
			SELECT 1 FROM accounts a
			WHERE a.id IN (t.from_account_id, t.to_account_id) AND a.owner_id = $2))`, id, ownerID, kinds))
}

// Unclaim withdraws the claim of scope for resource id (a transfer or a payout) when its run
// could not start (an earlier use of the key still runs under the workflow ID) and nothing was
// done: the record without an answer, the pending transfer without entries, the processing
// payout without a hold. The caller was told nothing was done; no recovery pass may later run
// what it was told of as not done. A claim that has moved on is left as it is.
func (l *Ledger) Unclaim(ctx context.Context, scope idempotency.Scope, id string) error {
	return database.Outage(l.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM idempotency_records
			WHERE owner_id = $1 AND route = $2 AND key = $3 AND resource_id = $4 AND status_code IS NULL`,
			scope.OwnerID, scope.Route, scope.Key, id)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM transfers t WHERE id = $1 AND status = 'pending'
			AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.transfer_id = t.id)`, id); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `DELETE FROM payouts p WHERE id = $1 AND status = 'processing'
			AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.payout_id = p.id)`, id); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `DELETE FROM authorizations WHERE id = $1 AND status = 'pending'`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM scheduled_transfers WHERE id = $1 AND status = 'pending'`, id)
		return err
	}))
}

// LockClaim returns a function that runs f holding the lock of scope's claim (its idempotency
// record), so that the starters of one use of a key take turns: operation.Operation.Lock.
func (l *Ledger) LockClaim(scope idempotency.Scope) func(ctx context.Context, f func() error) error {
	return func(ctx context.Context, f func() error) error {
		return database.Outage(l.InTx(ctx, func(tx pgx.Tx) error {
			if err := idempotency.Lock(ctx, tx, scope); err != nil {
				return err
			}
			return f()
		}))
	}
}

// qualified prefixes each of columns (a list such as transferColumns) with table, for a query
// that joins another table with columns of the same names.
func qualified(table, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// Retries counts ledger transactions retried after a serialization failure or deadlock.
var Retries = promauto.NewCounter(prometheus.CounterOpts{
	Name: "payments_ledger_transaction_retries_total",
	Help: "Ledger transactions retried after a serialization failure or a deadlock.",
})

const maxAttempts = 8

// InTx runs f in a transaction, again when PostgreSQL aborted it for a serialization failure or
// a deadlock (a bounded number of times, with jittered backoff, counted in Retries). f must be
// safe to run again: each run sees only what committed before it.
func (l *Ledger) InTx(ctx context.Context, f func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, l.DB, f)
		if err == nil || attempt == maxAttempts || !retryable(err) {
			return err
		}
		Retries.Inc()
		// Full jitter over an exponential window: 2 ms, 4 ms, … capped at 200 ms.
		window := min(2*time.Millisecond<<attempt, 200*time.Millisecond)
		select {
		case <-time.After(mathrand.N(window)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// change runs f in a transaction (InTx) that appends the events f adds, last, just before it
// commits; after the commit, the endpoints subscribed to them are woken (Wake).
func (l *Ledger) change(ctx context.Context, f func(tx pgx.Tx, o *outbox) error) error {
	var woken []string
	err := l.InTx(ctx, func(tx pgx.Tx) error {
		o := &outbox{}
		if err := f(tx, o); err != nil {
			return err
		}
		if l.noEvents {
			return nil
		}
		var err error
		woken, err = flushEvents(ctx, tx, o)
		return err
	})
	if err == nil && len(woken) > 0 && l.Wake != nil {
		l.Wake(woken)
	}
	return err
}
