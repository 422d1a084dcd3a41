package ledger

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// OpenAccount opens a customer account for s's owner once per use of its key, with its record and
// answer in one transaction: a duplicate waits on the first one's row lock, then gets the answer.
func (l *Ledger) OpenAccount(ctx context.Context, s idempotency.Scope, fingerprint []byte, ttl time.Duration,
	a Account, answer func(Account) idempotency.Response) (idempotency.Response, bool, error) {
	resp, replayed, _, err := idempotency.Once(ctx, l.DB, s, fingerprint, NewID("acc_"), ttl,
		func(tx pgx.Tx, id string) (idempotency.Response, error) {
			acc, err := CreateAccount(ctx, tx, id, s.OwnerID, a.Currency, a.Name, a.Metadata)
			return answer(acc), err
		})
	return resp, replayed, err
}

// CreateAccount opens a customer account with id for ownerID.
func CreateAccount(ctx context.Context, q database.Querier, id, ownerID, currency, name string, metadata Metadata) (Account, error) {
	return scanAccount(q.QueryRow(ctx, `
		INSERT INTO accounts (id, owner_id, currency, name, kind, metadata) VALUES ($1, $2, $3, $4, 'customer', $5)
		RETURNING `+accountColumns, id, ownerID, currency, name, metadata.stored()))
}

// OwnerAccounts lists the accounts of ownerID, oldest first.
func (l *Ledger) OwnerAccounts(ctx context.Context, ownerID string) ([]Account, error) {
	rows, err := l.DB.Query(ctx, `SELECT `+accountColumns+` FROM accounts WHERE owner_id = $1 ORDER BY created_at, id`, ownerID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Account, error) { return scanAccount(row) })
}

// Entry is one side of a posted transfer, as the API shows it.
type Entry struct {
	TransferID        string    `json:"transfer_id"`
	AmountMinor       int64     `json:"amount_minor"`
	BalanceAfterMinor int64     `json:"balance_after_minor"`
	CreatedAt         time.Time `json:"created_at"`
}

// EntryPage is one page of an account's entries, newest first.
type EntryPage struct {
	Data       []Entry `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// ErrBadCursor means the cursor was not made by Entries.
var ErrBadCursor = errors.New("invalid cursor")

// Entries returns up to limit entries of account older than cursor (an opaque entry id). Ids only
// grow, and entries are written under the account's row lock, so a page never shifts.
func (l *Ledger) Entries(ctx context.Context, account, cursor string, limit int) (EntryPage, error) {
	var before int64 = 1<<63 - 1
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil {
			return EntryPage{}, ErrBadCursor
		}
		if before, err = strconv.ParseInt(string(raw), 10, 64); err != nil || before <= 0 {
			return EntryPage{}, ErrBadCursor
		}
	}
	rows, err := l.DB.Query(ctx, `
		SELECT id, transfer_id, amount_minor, balance_after_minor, created_at FROM entries
		WHERE account_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, account, before, limit+1)
	if err != nil {
		return EntryPage{}, err
	}
	defer rows.Close()
	page := EntryPage{Data: []Entry{}}
	var lastID int64
	for rows.Next() {
		var e Entry
		var id int64
		if err := rows.Scan(&id, &e.TransferID, &e.AmountMinor, &e.BalanceAfterMinor, &e.CreatedAt); err != nil {
			return EntryPage{}, err
		}
		if len(page.Data) == limit {
			next := base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(lastID, 10)))
			page.NextCursor = &next
			break
		}
		e.CreatedAt = UTC(e.CreatedAt)
		page.Data = append(page.Data, e)
		lastID = id
	}
	return page, rows.Err()
}
