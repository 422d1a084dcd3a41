package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/ledger"
)

// PayinInput is what a payin workflow takes: the bank's credit, as its verified event said.
type PayinInput struct {
	ledger.Credit
	RetryFor config.Duration // how long crediting retries technical failures (DefaultRetryFor when 0)
}

// PayinOutcome is what a payin workflow returns: the payin, credited or unmatched.
type PayinOutcome = activities.Credited

// PayinSummary is the one line the Temporal UI shows for a payin: the amount, the currency and
// the bank event, never the account number the money was sent to (contract §10).
func PayinSummary(in PayinInput) string {
	return fmt.Sprintf("payin of %s %s minor (bank event %s)", groupThousands(in.AmountMinor), in.Currency, in.BankEventID)
}

// Payin credits money that arrived through the bank, once per bank event (the workflow ID and the
// ledger's payin row are keyed by it).
func Payin(ctx workflow.Context, in PayinInput) (PayinOutcome, error) {
	var a *activities.Activities
	ctx = workflow.WithLocalActivityOptions(ctx, ledgerOptions(in.RetryFor))
	var out PayinOutcome
	err := workflow.ExecuteLocalActivity(ctx, a.CreditPayin, in.Credit).Get(ctx, &out)
	return out, err
}
