package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"

	"github.com/payments/payments/internal/ledger"
)

// Credited is what crediting a payin ended with: credited, or unmatched (no account has that
// number in that currency; kept for operators).
type Credited struct {
	PayinID   string
	Status    string
	AccountID string
}

// CreditPayin credits the money of a bank credit, once per bank event (ledger.CreditPayin).
func (a *Activities) CreditPayin(ctx context.Context, c ledger.Credit) (Credited, error) {
	p, err := a.Ledger.CreditPayin(ctx, c)
	if err != nil {
		if err = final(err); !errors.Is(err, ledger.ErrInvalidPosting) {
			activity.GetLogger(ctx).Warn("crediting a payin failed; retrying", "bank_event_id", c.BankEventID, "err", err)
		}
		return Credited{}, err
	}
	out := Credited{PayinID: p.ID, Status: p.Status}
	if p.AccountID != nil {
		out.AccountID = *p.AccountID
	}
	activity.GetLogger(ctx).Info("payin", "payin_id", p.ID, "bank_event_id", c.BankEventID, "status", p.Status, "account_id", out.AccountID)
	return out, nil
}
