package ledger

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Filter narrows a list of transfers or payouts (docs/contract.md §8): to one of the owner's
// accounts, a status, a creation window; Limit rows after Cursor.
type Filter struct {
	AccountID string
	Status    string
	// Exclusive bounds; nil: no bound. Not the zero time, which is a bound like any other (the
	// year 1: nothing was created before it).
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	Limit         int
	Cursor        string
	// ScheduledTransferID narrows a list of transfers to the occurrences of one scheduled
	// transfer.
	ScheduledTransferID string
}

// Page is a page of a list, newest first.
type Page[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// keyset is a list's position: the (created_at, id) of the last row of a page.
type keyset struct {
	at time.Time
	id string
}

func (k keyset) cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(k.at.UTC().Format(time.RFC3339Nano) + " " + k.id))
}

// parseCursor reads a cursor made by keyset.cursor; the zero keyset (from the newest) for "".
func parseCursor(c string) (keyset, error) {
	if c == "" {
		return keyset{at: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), id: ""}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return keyset{}, ErrBadCursor
	}
	at, id, ok := strings.Cut(string(raw), " ")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || id == "" {
		return keyset{}, ErrBadCursor
	}
	return keyset{at: t, id: id}, nil
}

// bounds are the creation window of f, as the queries take it: without a bound, one that no
// row is created beyond.
func (f Filter) bounds() (after, before time.Time) {
	after, before = time.Unix(0, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if f.CreatedAfter != nil {
		after = *f.CreatedAfter
	}
	if f.CreatedBefore != nil {
		before = *f.CreatedBefore
	}
	return after, before
}

// Transfers lists the transfers that touch ownerID's accounts (or f.AccountID, one of them),
// newest first, by keyset: a page never shifts when new transfers arrive. For each account it
// reads the newest of its debits and of its credits from their indexes, without sorting the
// account's history; a transfer between two of the owner's accounts is listed once.
func (l *Ledger) Transfers(ctx context.Context, ownerID string, f Filter) (Page[Transfer], error) {
	where, extra := "t.kind = 'transfer' AND", []any{}
	if f.ScheduledTransferID != "" {
		where, extra = where+" t.scheduled_transfer_id = $9 AND", []any{f.ScheduledTransferID}
	}
	return list(ctx, l, ownerID, f, touching("transfers", transferColumns, where),
		func(row pgx.CollectableRow) (Transfer, error) { return scanTransfer(row) },
		func(t Transfer) keyset { return keyset{t.CreatedAt, t.ID} }, extra...)
}

// Authorizations lists the authorizations that touch ownerID's accounts (or f.AccountID, one of
// them), newest first, by keyset, as Transfers lists transfers.
func (l *Ledger) Authorizations(ctx context.Context, ownerID string, f Filter) (Page[Authorization], error) {
	return list(ctx, l, ownerID, f, touching("authorizations", authorizationColumns, ""),
		func(row pgx.CollectableRow) (Authorization, error) { return scanAuthorization(row) },
		func(a Authorization) keyset { return keyset{a.CreatedAt, a.ID} })
}

// touching is list's perAccount for a table of rows between two accounts (from_account_id,
// to_account_id): account a's debits, then its credits from accounts not listed already. where
// narrows the rows further ("… AND").
func touching(table, columns, where string) string {
	side := func(column, exclude string) string {
		return `(SELECT ` + qualified("t", columns) + ` FROM ` + table + ` t WHERE t.` + column + ` = a.id
			AND ` + where + ` ($3 = '' OR t.status = $3) AND t.created_at > $4 AND t.created_at < $5
			AND (t.created_at, t.id) < ($6, $7)` + exclude + `
			ORDER BY t.created_at DESC, t.id DESC LIMIT $8)`
	}
	return side("from_account_id", "") + ` UNION ALL ` +
		side("to_account_id", ` AND NOT EXISTS (SELECT 1 FROM accounts f WHERE f.id = t.from_account_id
			AND f.owner_id = $1 AND ($2 = '' OR f.id = $2))`)
}

// Payouts lists the payouts of ownerID's accounts (or f.AccountID, one of them), newest first,
// by keyset, each account's read from its index.
func (l *Ledger) Payouts(ctx context.Context, ownerID string, f Filter) (Page[Payout], error) {
	return list(ctx, l, ownerID, f, `SELECT `+qualified("p", payoutColumns)+` FROM payouts p WHERE p.account_id = a.id
			AND ($3 = '' OR p.status = $3) AND p.created_at > $4 AND p.created_at < $5
			AND (p.created_at, p.id) < ($6, $7)
			ORDER BY p.created_at DESC, p.id DESC LIMIT $8`,
		func(row pgx.CollectableRow) (Payout, error) { return scanPayout(row) },
		func(p Payout) keyset { return keyset{p.CreatedAt, p.ID} })
}

// list runs perAccount (rows of one account a, newest first, taking $1 owner, $2 account_id,
// $3 status, $4 and $5 the window, $6 and $7 the cursor, $8 the page size, $9 … extra) for each
// of ownerID's accounts that f admits, and returns the newest page of what they found.
func list[T any](ctx context.Context, l *Ledger, ownerID string, f Filter, perAccount string,
	scan pgx.RowToFunc[T], key func(T) keyset, extra ...any) (Page[T], error) {
	k, err := parseCursor(f.Cursor)
	if err != nil {
		return Page[T]{}, err
	}
	after, before := f.bounds()
	rows, err := l.DB.Query(ctx, `
		SELECT x.* FROM accounts a CROSS JOIN LATERAL (`+perAccount+`) x
		WHERE a.owner_id = $1 AND ($2 = '' OR a.id = $2)
		ORDER BY x.created_at DESC, x.id DESC LIMIT $8`,
		append([]any{ownerID, f.AccountID, f.Status, after, before, k.at, k.id, f.Limit + 1}, extra...)...)
	if err != nil {
		return Page[T]{}, err
	}
	found, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return Page[T]{}, err
	}
	if len(found) <= f.Limit {
		return Page[T]{Data: append([]T{}, found...)}, nil
	}
	next := key(found[f.Limit-1]).cursor()
	return Page[T]{Data: found[:f.Limit], NextCursor: &next}, nil
}
