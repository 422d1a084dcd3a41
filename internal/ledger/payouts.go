package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Payout is a payout as the API shows it.
type Payout struct {
	ID            string           `json:"id"`
	Status        PayoutStatus     `json:"status"`
	AccountID     string           `json:"account_id"`
	AmountMinor   int64            `json:"amount_minor"`
	Currency      string           `json:"currency"`
	Destination   bank.Destination `json:"destination"`
	Description   string           `json:"description"`
	WorkflowID    string           `json:"workflow_id"`
	BankPaymentID *string          `json:"bank_payment_id"`
	CreatedAt     time.Time        `json:"created_at"`
	PaidAt        *time.Time       `json:"paid_at"`
	FailedAt      *time.Time       `json:"failed_at"`
	ReturnedAt    *time.Time       `json:"returned_at"`
	FailureReason *string          `json:"failure_reason"`
	ApprovedBy    *string          `json:"approved_by"` // the id of the key that approved it
	RejectedBy    *string          `json:"rejected_by"` // the id of the key that rejected it
	Metadata      Metadata         `json:"metadata"`
	// CreatedByKey is the id of the key that asked for it (empty before approvals existed).
	CreatedByKey string `json:"-"`
	// ApprovalDueAt is when a payout that needs approval fails if nobody has decided (nil: it
	// needs none).
	ApprovalDueAt *time.Time `json:"-"`
}

// NeedsApproval reports whether po waits, or waited, for a second key's approval.
func (po Payout) NeedsApproval() bool { return po.ApprovalDueAt != nil }

// PayoutAnswer is the first answer to a payout, in the shape of the edge that received it
// (api.PayoutAnswer): stored in the transaction that holds its money, replayed byte for byte.
type PayoutAnswer func(Payout) idempotency.Response

// ReasonInsufficientFunds is the failure_reason of a payout refused at once.
const ReasonInsufficientFunds = "insufficient funds"

const payoutColumns = `id, status, account_id, amount_minor, currency, destination_account_number,
	destination_bank_code, description, workflow_id, bank_payment_id, created_at, paid_at, failed_at,
	returned_at, failure_reason, metadata, approved_by, rejected_by, created_by_key, approval_due_at`

func scanPayout(row pgx.Row) (Payout, error) {
	var p Payout
	err := row.Scan(&p.ID, &p.Status, &p.AccountID, &p.AmountMinor, &p.Currency, &p.Destination.AccountNumber,
		&p.Destination.BankCode, &p.Description, &p.WorkflowID, &p.BankPaymentID, &p.CreatedAt, &p.PaidAt,
		&p.FailedAt, &p.ReturnedAt, &p.FailureReason, &p.Metadata, &p.ApprovedBy, &p.RejectedBy, &p.CreatedByKey, &p.ApprovalDueAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, ErrNotFound
	}
	p.CreatedAt = UTC(p.CreatedAt)
	utcAll(&p.PaidAt, &p.FailedAt, &p.ReturnedAt, &p.ApprovalDueAt)
	return p, err
}

// ReturnID is the id of the posting that credits a returned payout back.
func ReturnID(payoutID string) string { return "rt_" + strings.TrimPrefix(payoutID, "po_") }

// InsertPayout records a payout, processing, when its request is claimed and before its
// workflow starts, so that it can be read at once. No money is held yet: PlaceHold holds it.
// One that needs approval waits for it from now for approvalFor (0: it needs none), and is
// returned as recorded.
func InsertPayout(ctx context.Context, q database.Querier, p Payout, approvalFor time.Duration) (Payout, error) {
	return scanPayout(q.QueryRow(ctx, `
		INSERT INTO payouts (id, status, account_id, amount_minor, currency, destination_account_number,
			destination_bank_code, description, workflow_id, metadata, created_by_key, approval_due_at)
		VALUES ($1, 'processing', $2, $3, $4, $5, $6, $7, $8, $9, $10,
			CASE WHEN $11::bigint > 0 THEN now() + $11 * interval '1 microsecond' END)
		RETURNING `+payoutColumns,
		p.ID, p.AccountID, p.AmountMinor, p.Currency, p.Destination.AccountNumber, p.Destination.BankCode,
		p.Description, p.WorkflowID, p.Metadata.stored(), p.CreatedByKey, approvalFor.Microseconds()))
}

// ClaimedPayout is payout id as claimed.
func ClaimedPayout(ctx context.Context, q database.Querier, id string) (Payout, error) {
	return scanPayout(q.QueryRow(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE id = $1`, id))
}

// Payout returns payout id if ownerID holds its account (any owner when empty).
func (l *Ledger) Payout(ctx context.Context, ownerID, id string) (Payout, error) {
	return scanPayout(l.DB.QueryRow(ctx, `
		SELECT `+payoutColumns+` FROM payouts p
		WHERE id = $1 AND ($2 = '' OR EXISTS (SELECT 1 FROM accounts a WHERE a.id = p.account_id AND a.owner_id = $2))`,
		id, ownerID))
}

// lockPayout reads payout id and locks it for the rest of tx: the one order every change of a
// payout takes its locks in is this row first, then its accounts in id order.
func lockPayout(ctx context.Context, tx pgx.Tx, id string) (Payout, error) {
	return scanPayout(tx.QueryRow(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE id = $1 FOR UPDATE`, id))
}

// PayoutHold names the payout whose money PlaceHold holds, and the idempotency scope its first
// answer is stored under. A payout workflow's input holds it (workflows.PayoutInput), the
// scope's fields as its own (OwnerID, Route, Key), as histories hold them.
type PayoutHold struct {
	PayoutID string
	idempotency.Scope
	ReplayFor config.Duration // how long the stored answer is replayed
}

// PlaceHold holds the money of payout h, once however often it is called: if its account has
// the amount available, a hold of it (the available balance drops, the posted one does not);
// otherwise the payout fails for insufficient funds. The first answer, made by answer, is stored
// under h's scope in the same transaction; called again, it returns the stored answer.
func (l *Ledger) PlaceHold(ctx context.Context, h PayoutHold, answer PayoutAnswer) (po Payout, resp idempotency.Response, err error) {
	id, scope := h.PayoutID, h.Scope
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if po, err = lockPayout(ctx, tx, id); err != nil {
			return err
		}
		var held bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM holds WHERE payout_id = $1)`, id).Scan(&held); err != nil {
			return err
		}
		if held || po.Status != PayoutProcessing { // held (or refused) before
			resp, err = storedPayoutAnswer(ctx, tx, scope, po, answer)
			return err
		}
		accounts, err := lockAccounts(ctx, tx, po.AccountID)
		if err != nil {
			return err
		}
		acc := accounts[po.AccountID]
		if acc.Kind != KindCustomer || acc.Currency != po.Currency {
			return fmt.Errorf("%w: payout in %s from a %s account in %s", ErrInvalidPosting, po.Currency, acc.Kind, acc.Currency)
		}
		switch {
		case acc.AvailableMinor < po.AmountMinor:
			po, err = endPayout(ctx, tx, id, PayoutFailed, "failed_at", ReasonInsufficientFunds)
		case po.NeedsApproval():
			if err = placeHold(ctx, tx, "payout_id", po.ID, po.AccountID, po.AmountMinor); err == nil {
				po, err = scanPayout(tx.QueryRow(ctx, `UPDATE payouts SET status = 'pending_approval' WHERE id = $1
					RETURNING `+payoutColumns, id))
			}
		default:
			po, err = hold(ctx, tx, po)
		}
		if err != nil {
			return err
		}
		o.payout(po)
		resp = answer(po)
		return idempotency.Complete(ctx, tx, scope, resp, time.Duration(h.ReplayFor))
	})
	return po, resp, err
}

func hold(ctx context.Context, tx pgx.Tx, po Payout) (Payout, error) {
	return po, placeHold(ctx, tx, "payout_id", po.ID, po.AccountID, po.AmountMinor)
}

// placeHold holds amount on account for the payout or authorization id (column names which):
// the account's available balance drops, its posted one does not.
func placeHold(ctx context.Context, tx pgx.Tx, column, id, account string, amount int64) error {
	_, err := tx.Exec(ctx, `
		WITH h AS (INSERT INTO holds (`+column+`, account_id, amount_minor, status) VALUES ($1, $2, $3, 'open'))
		UPDATE accounts SET held_minor = held_minor + $3 WHERE id = $2`, id, account, amount)
	return err
}

// releaseHold releases hold id if it is open: its amount is available again.
func releaseHold(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `
		WITH h AS (UPDATE holds SET status = 'released', ended_at = now() WHERE id = $1 AND status = 'open' RETURNING account_id, amount_minor)
		UPDATE accounts a SET held_minor = held_minor - h.amount_minor FROM h WHERE a.id = h.account_id`, id)
	return err
}

// storedPayoutAnswer is the answer stored when po's money was held (or refused), or made again
// by answer when its record has expired and been deleted.
func storedPayoutAnswer(ctx context.Context, q database.Querier, s idempotency.Scope, po Payout, answer PayoutAnswer) (idempotency.Response, error) {
	return storedAnswer(ctx, q, s, po.ID, func() idempotency.Response { return answer(po) })
}

// endPayout sets payout id's status, the time column of it, and the reason.
func endPayout(ctx context.Context, tx pgx.Tx, id string, status PayoutStatus, at, reason string) (Payout, error) {
	return scanPayout(tx.QueryRow(ctx, `
		UPDATE payouts SET status = $2, `+at+` = now(), failure_reason = COALESCE(NULLIF($3, ''), failure_reason)
		WHERE id = $1 RETURNING `+payoutColumns, id, status, reason))
}

// ErrSecondBankPayment is a payout the bank reports a second, different payment for: the bank
// must make one payment per payout (invariant 8); an operator must look.
var ErrSecondBankPayment = errors.New("the bank reports a second payment for one payout")

// RecordBankPayment notes the bank's id of payout id's payment.
func (l *Ledger) RecordBankPayment(ctx context.Context, id, paymentID string) error {
	var recorded *string
	err := l.DB.QueryRow(ctx, `
		UPDATE payouts SET bank_payment_id = COALESCE(bank_payment_id, $2) WHERE id = $1
		RETURNING bank_payment_id`, id, paymentID).Scan(&recorded)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err == nil && (recorded == nil || *recorded != paymentID) {
		return fmt.Errorf("%w: payout %s, payments %v and %s", ErrSecondBankPayment, id, recorded, paymentID)
	}
	return err
}

// SettlePayout ends payout id as the bank said: paid, its hold posted to the currency's
// settlement account (the money leaves); or failed for reason, its hold released (the money is
// available again). A payout no longer processing is returned as it stands: the bank's outcome
// is applied once, however often it is told.
func (l *Ledger) SettlePayout(ctx context.Context, id string, paid bool, reason string) (po Payout, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if po, err = lockPayout(ctx, tx, id); err != nil || po.Status != PayoutProcessing {
			return err
		}
		if paid {
			if _, _, err := post(ctx, tx, o, Posting{TransferID: po.ID, WorkflowID: po.WorkflowID, From: po.AccountID,
				To: SettlementAccountID(po.Currency), AmountMinor: po.AmountMinor, Currency: po.Currency,
				Description: "payout " + po.ID, Kind: KindPayout}, nil); err != nil {
				return err
			}
			po, err = endPayout(ctx, tx, id, PayoutPaid, "paid_at", "")
			o.payout(po)
			return err
		}
		if err := releaseHold(ctx, tx, id); err != nil {
			return err
		}
		po, err = endPayout(ctx, tx, id, PayoutFailed, "failed_at", reason)
		o.payout(po)
		return err
	})
	return po, err
}

// ReturnPayout credits a paid payout back to its account, as postings of their own, when its
// beneficiary's bank sent it back for reason. A payout already returned is returned as it stands:
// the payout's run, a late callback and the statement Schedule may each hear of one return, and
// under the payout's row lock the first credits it and the others find it returned.
func (l *Ledger) ReturnPayout(ctx context.Context, id, reason string) (po Payout, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if po, err = lockPayout(ctx, tx, id); err != nil || po.Status == PayoutReturned {
			return err
		}
		if po.Status != PayoutPaid {
			return fmt.Errorf("%w: payout %s is %s, not paid", ErrInvalidPosting, id, po.Status)
		}
		if _, _, err := post(ctx, tx, o, Posting{TransferID: ReturnID(po.ID), WorkflowID: po.WorkflowID,
			From: SettlementAccountID(po.Currency), To: po.AccountID, AmountMinor: po.AmountMinor, Currency: po.Currency,
			Description: "return of payout " + po.ID, Kind: KindReturn}, nil); err != nil {
			return err
		}
		po, err = endPayout(ctx, tx, id, PayoutReturned, "returned_at", reason)
		o.payout(po)
		return err
	})
	return po, err
}

// Processing calls f for every payout still processing or waiting for approval that was claimed
// more than olderThan ago, oldest first, a page at a time: those whose run the recovery pass
// looks at.
func (l *Ledger) Processing(ctx context.Context, olderThan time.Duration, f func([]Payout) error) error {
	return olderPages(ctx, l.DB, `SELECT `+payoutColumns+` FROM payouts WHERE status IN ('processing', 'pending_approval')`, olderThan,
		func(row pgx.CollectableRow) (Payout, error) { return scanPayout(row) },
		func(po Payout) (time.Time, string) { return po.CreatedAt, po.ID }, f)
}

// PayoutsUnder counts the payouts made under workflow ID id: one per use of its key.
func PayoutsUnder(ctx context.Context, q database.Querier, id string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM payouts WHERE workflow_id = $1`, id).Scan(&n)
	return n, err
}

// PaidPayouts returns the payouts among ids that are paid (the others, or ids of no payout,
// are left out).
func (l *Ledger) PaidPayouts(ctx context.Context, ids []string) ([]Payout, error) {
	rows, _ := l.DB.Query(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE status = 'paid' AND id = ANY($1) ORDER BY id`, ids)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Payout, error) { return scanPayout(row) })
}
