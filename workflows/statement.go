package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
)

// The statement Schedule: every StatementEvery, CreditBankReturns credits back the paid payouts
// the bank has returned. A payout's run hears a return within its window; one after it, whose
// callback is lost or was refused, is found here, at most StatementEvery later.
const (
	StatementScheduleID = "payout-returns"
	StatementEvery      = 30 * time.Minute
)

// CreditBankReturns is one reading of the bank's statement. A bank that cannot be read is tried
// three times; the next pass reads it again.
func CreditBankReturns(ctx workflow.Context) (activities.StatementResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3}})
	var a *activities.Activities
	var res activities.StatementResult
	err := workflow.ExecuteActivity(ctx, a.CreditBankReturns).Get(ctx, &res)
	return res, err
}
