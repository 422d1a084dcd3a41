package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/payments/payments/internal/bank"
)

// StatementResult is what one reading of the bank's statement found: returned payments, the paid
// payouts credited back now, and those whose payout records another payment (invariant 8).
type StatementResult struct {
	Returned  int
	Credited  int
	Disagreed int
}

// CreditBankReturns reads the bank's statement and credits back every payout the bank returned
// while the ledger still has it paid (after its run's window, or whose callback never came).
// ReturnPayout applies once however often it is called, so racing a run or a callback is harmless.
func (a *Activities) CreditBankReturns(ctx context.Context) (StatementResult, error) {
	statement, err := a.Bank.Statement(ctx)
	if err != nil {
		return StatementResult{}, fmt.Errorf("reading the bank's statement: %w", err)
	}
	var res StatementResult
	byPayout := map[string]bank.Payment{}
	for _, p := range statement {
		if p.Status == bank.Returned {
			res.Returned++
			byPayout[p.Reference] = p
		}
	}
	paid, err := a.Ledger.PaidPayouts(ctx, keys(byPayout))
	if err != nil {
		return res, err
	}
	var errs []error
	for _, po := range paid {
		p := byPayout[po.ID]
		if po.BankPaymentID == nil || *po.BankPaymentID != p.ID {
			res.Disagreed++
			activity.GetLogger(ctx).Error("the bank returned a payment that is not the one the payout records",
				"payout_id", po.ID, "bank_payment_id", p.ID, "recorded", po.BankPaymentID)
			continue
		}
		reason := bank.Returned
		if p.Reason != nil {
			reason = *p.Reason
		}
		if _, err := a.Ledger.ReturnPayout(ctx, po.ID, reason); err != nil {
			errs = append(errs, fmt.Errorf("payout %s: %w", po.ID, err))
			continue
		}
		res.Credited++
		activity.GetLogger(ctx).Info("a return found on the bank's statement credited back", "payout_id", po.ID, "bank_payment_id", p.ID)
	}
	return res, errors.Join(errs...)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
