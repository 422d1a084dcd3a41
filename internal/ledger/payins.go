package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
)

// Payin is money that arrived through the bank for an account number: credited, or unmatched.
type Payin struct {
	ID            string    `json:"id"`
	BankEventID   string    `json:"bank_event_id"`
	AccountNumber string    `json:"account_number"`
	AccountID     *string   `json:"account_id"`
	AmountMinor   int64     `json:"amount_minor"`
	Currency      string    `json:"currency"`
	Reference     string    `json:"reference"`
	Status        string    `json:"status"` // credited or unmatched
	CreatedAt     time.Time `json:"created_at"`
}

// Statuses of a payin.
const (
	PayinCredited  = "credited"
	PayinUnmatched = "unmatched"
)

// Credit is what a credit.received event says arrived.
type Credit struct {
	BankEventID   string
	AccountNumber string
	AmountMinor   int64
	Currency      string
	Reference     string
}

const payinColumns = `id, bank_event_id, account_number, account_id, amount_minor, currency, reference, status, created_at`

func scanPayin(row pgx.Row) (Payin, error) {
	var p Payin
	err := row.Scan(&p.ID, &p.BankEventID, &p.AccountNumber, &p.AccountID, &p.AmountMinor, &p.Currency,
		&p.Reference, &p.Status, &p.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, ErrNotFound
	}
	p.CreatedAt = UTC(p.CreatedAt)
	return p, err
}

// CreditPayin credits a bank credit to the customer account whose number it names, once per bank
// event however concurrently it is called: the payin and its posting commit together, keyed by
// the event id (so a second posting finds the first); an unknown number is recorded unmatched.
// Text PostgreSQL cannot store is escaped (bank.Storable): a credit is never refused for its text.
func (l *Ledger) CreditPayin(ctx context.Context, c Credit) (p Payin, err error) {
	for _, text := range []*string{&c.BankEventID, &c.AccountNumber, &c.Currency, &c.Reference} {
		*text = bank.Storable(*text)
	}
	scope := idempotency.Scope{Route: idempotency.RoutePayin, Key: c.BankEventID}
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if p, err = payinOfEvent(ctx, tx, c.BankEventID); !errors.Is(err, ErrNotFound) {
			return err // credited (or recorded) before, or an error
		}
		var account string
		err := tx.QueryRow(ctx, `SELECT id FROM accounts WHERE account_number = $1 AND kind = 'customer' AND currency = $2`,
			c.AccountNumber, c.Currency).Scan(&account)
		id := scope.PayinID()
		status, transferID := PayinCredited, &id
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			status, transferID = PayinUnmatched, nil
		case err != nil:
			return err
		default:
			if _, _, err := post(ctx, tx, o, Posting{TransferID: *transferID, WorkflowID: scope.WorkflowID(),
				From: SettlementAccountID(c.Currency), To: account, AmountMinor: c.AmountMinor, Currency: c.Currency,
				Description: c.Reference, Kind: KindPayin}, nil); err != nil {
				return err
			}
		}
		var accountID *string
		if transferID != nil {
			accountID = &account
		}
		// A concurrent call for the same event may have recorded it since the read above (for a
		// credit, its posting of the same transfer id made this one wait, then find it posted,
		// moving nothing): then its row is the payin, and it announced the payin's event.
		p, err = scanPayin(tx.QueryRow(ctx, `
			INSERT INTO payins (id, bank_event_id, account_number, account_id, amount_minor, currency, reference, status, transfer_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT DO NOTHING
			RETURNING `+payinColumns, id, c.BankEventID, c.AccountNumber, accountID, c.AmountMinor,
			c.Currency, c.Reference, status, transferID))
		if errors.Is(err, ErrNotFound) {
			p, err = payinOfEvent(ctx, tx, c.BankEventID)
		} else if err == nil && p.AccountID != nil {
			o.add(EventPayinReceived, p.ID, p, *p.AccountID)
		}
		return err
	})
	return p, err
}

func payinOfEvent(ctx context.Context, tx pgx.Tx, bankEventID string) (Payin, error) {
	return scanPayin(tx.QueryRow(ctx, `SELECT `+payinColumns+` FROM payins WHERE bank_event_id = $1`, bankEventID))
}

// RecordBankEvent keeps a verified bank event under its id, and reports whether body is that
// event: the first body under the id, or the same bytes again (the bank resends byte for byte).
// A different body under a known id is kept in bank_event_conflicts and must have no effect.
func (l *Ledger) RecordBankEvent(ctx context.Context, id, typ string, body []byte) (theEvent bool, err error) {
	tag, err := l.DB.Exec(ctx, `INSERT INTO bank_events (id, type, body) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`, id, typ, body)
	if err != nil || tag.RowsAffected() == 1 {
		return err == nil, err
	}
	// A statement of its own, so that it sees the row a concurrent insert committed.
	if err := l.DB.QueryRow(ctx, `SELECT body = $2 FROM bank_events WHERE id = $1`, id, body).Scan(&theEvent); err != nil || theEvent {
		return theEvent, err
	}
	_, err = l.DB.Exec(ctx, `
		INSERT INTO bank_event_conflicts (event_id, body_sha256, body) VALUES ($1, sha256($2), $2)
		ON CONFLICT (event_id, body_sha256) DO UPDATE SET copies = bank_event_conflicts.copies + 1, last_at = now()`, id, body)
	return false, err
}

// MalformedBankEventID is the bank_events key of a signed callback that is no event: no event id
// has a space, so it is no event's, and the same bytes sent again are kept once.
func MalformedBankEventID(body []byte) string {
	sum := sha256.Sum256(body)
	return "malformed sha256:" + hex.EncodeToString(sum[:])
}

// RecordMalformedBankEvent keeps a signed callback that is no event, for operators, and returns
// the key it is kept under. reason must be storable text.
func (l *Ledger) RecordMalformedBankEvent(ctx context.Context, body []byte, reason string) (string, error) {
	id := MalformedBankEventID(body)
	_, err := l.DB.Exec(ctx, `INSERT INTO bank_events (id, type, body, outcome) VALUES ($1, '', $2, $3) ON CONFLICT (id) DO NOTHING`,
		id, body, "malformed: "+reason)
	return id, err
}

// NoteBankEvent records what became of bank event id the first time it was handed on.
func (l *Ledger) NoteBankEvent(ctx context.Context, id, outcome string) error {
	_, err := l.DB.Exec(ctx, `UPDATE bank_events SET outcome = $2 WHERE id = $1 AND outcome = 'received'`, id, outcome)
	return err
}
