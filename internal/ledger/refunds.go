package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/payments/payments/internal/idempotency"
)

// Refund is a refund as the API shows it (docs/contract.md §8). The ledger holds it as a
// posting of KindRefund: money back from its transfer's destination to its source.
type Refund struct {
	ID            string         `json:"id"`
	TransferID    string         `json:"transfer_id"`
	AmountMinor   int64          `json:"amount_minor"`
	Currency      string         `json:"currency"`
	Status        TransferStatus `json:"status"`
	Description   string         `json:"description"`
	Metadata      Metadata       `json:"metadata"`
	WorkflowID    string         `json:"workflow_id"`
	CreatedAt     time.Time      `json:"created_at"`
	CompletedAt   *time.Time     `json:"completed_at"`
	FailureReason *string        `json:"failure_reason"`
}

// RefundView is the refund that posting r (of KindRefund) is.
func RefundView(r Transfer) Refund {
	out := Refund{ID: r.ID, AmountMinor: r.AmountMinor, Currency: r.Currency, Status: r.Status,
		Description: r.Description, Metadata: r.Metadata, WorkflowID: r.WorkflowID, CreatedAt: r.CreatedAt,
		CompletedAt: r.CompletedAt, FailureReason: r.FailureReason}
	if r.RefundOf != nil {
		out.TransferID = *r.RefundOf
	}
	return out
}

// Refund returns refund id if ownerID holds either of its accounts (any owner when empty).
func (l *Ledger) Refund(ctx context.Context, ownerID, id string) (Refund, error) {
	t, err := l.posting(ctx, ownerID, id, KindRefund)
	return RefundView(t), err
}

// Refundable returns transfer id and what a refund of it under s takes (all that remains when
// amount is nil), if s's owner may refund it (else ErrNotFound). More than remains is
// *RefundExceedsError unless the refund under s is claimed already: it may have just posted, and
// its run answers. The posting's transaction checks it all again and alone decides races.
func (l *Ledger) Refundable(ctx context.Context, s idempotency.Scope, id string, amount *int64) (Transfer, int64, error) {
	t, err := l.Transfer(ctx, s.OwnerID, id)
	if err != nil {
		return t, 0, err
	}
	from, to, err := l.Accounts(ctx, "", t.FromAccountID, t.ToAccountID)
	switch {
	case err != nil:
		return t, 0, err
	case to.OwnerID != s.OwnerID:
		return t, 0, ErrNotFound
	case from.Kind != KindCustomer || to.Kind != KindCustomer:
		return t, 0, &NotRefundableError{TransferID: t.ID, Deposit: true}
	case t.Status != TransferCompleted:
		return t, 0, &NotRefundableError{TransferID: t.ID, Status: t.Status}
	}
	remaining := t.AmountMinor - t.AmountRefundedMinor
	take := remaining
	if amount != nil {
		take = *amount
	}
	if take <= remaining && remaining > 0 {
		return t, take, nil
	}
	if _, claimed, err := idempotency.Lookup(ctx, l.DB, s); err != nil || claimed {
		return t, take, err
	}
	return t, take, &RefundExceedsError{TransferID: t.ID, RemainingMinor: remaining, Currency: t.Currency}
}

// NotRefundableError is a transfer no refund may take money from: a deposit, or a transfer
// that is not completed (Status).
type NotRefundableError struct {
	TransferID string
	Deposit    bool
	Status     TransferStatus
}

func (e *NotRefundableError) Error() string { return "transfer " + e.TransferID + " is not refundable" }

// RefundExceedsError is a refund of more than remains of its transfer (RemainingMinor), or of
// a transfer with nothing left.
type RefundExceedsError struct {
	TransferID     string
	RemainingMinor int64
	Currency       string
}

func (e *RefundExceedsError) Error() string {
	return fmt.Sprintf("transfer %s has %d %s left to refund", e.TransferID, e.RemainingMinor, e.Currency)
}
