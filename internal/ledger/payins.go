package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/idempotency"
)

// Payin is money that arrived through the bank for an account number: credited to the account
// that has it, or, when none has it in that currency, kept unmatched for operators.
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

// CreditPayin credits the money of a bank credit to the customer account whose number it names,
// from the currency's settlement account, through the same posting as a transfer, once per bank
// event however often it is called: the payin and its posting are written in one transaction,
// keyed by the bank's event id. An account number no customer account has in that currency is
// recorded unmatched, for operators, and credits nothing.
func (l *Ledger) CreditPayin(ctx context.Context, c Credit) (p Payin, err error) {
	scope := idempotency.Scope{Route: idempotency.RoutePayin, Key: c.BankEventID}
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if p, err = scanPayin(tx.QueryRow(ctx, `SELECT `+payinColumns+` FROM payins WHERE bank_event_id = $1`, c.BankEventID)); err == nil {
			return nil // credited (or recorded) before
		} else if !errors.Is(err, ErrNotFound) {
			return err
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
		p, err = scanPayin(tx.QueryRow(ctx, `
			INSERT INTO payins (id, bank_event_id, account_number, account_id, amount_minor, currency, reference, status, transfer_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			RETURNING `+payinColumns, id, c.BankEventID, c.AccountNumber, accountID, c.AmountMinor,
			c.Currency, c.Reference, status, transferID))
		if err == nil && p.AccountID != nil {
			o.add(EventPayinReceived, p.ID, p, *p.AccountID)
		}
		return err
	})
	return p, err
}

// RecordBankEvent keeps a verified bank event, once per event id (a copy sent again is not
// kept twice).
func (l *Ledger) RecordBankEvent(ctx context.Context, id, typ string, body []byte) error {
	_, err := l.DB.Exec(ctx, `INSERT INTO bank_events (id, type, body) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`, id, typ, body)
	return err
}

// NoteBankEvent records what became of bank event id the first time it was handed on, for
// operators: delivered to a payout's run, matched no payout, came after the payout's run had
// ended, … A later copy of the event (the bank sending it again) does not overwrite it.
func (l *Ledger) NoteBankEvent(ctx context.Context, id, outcome string) error {
	_, err := l.DB.Exec(ctx, `UPDATE bank_events SET outcome = $2 WHERE id = $1 AND outcome = 'received'`, id, outcome)
	return err
}
