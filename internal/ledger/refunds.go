package ledger

import (
	"context"
	"time"
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
