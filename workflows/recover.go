package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
)

// The recovery Schedule: every RecoveryEvery, RecoverTransfers resolves the transfers claimed
// more than StaleAfter ago and still pending, so that none stays pending for longer than
// StaleAfter + RecoveryEvery (ledger.PendingBound, which reconcile holds the ledger to).
const (
	RecoveryScheduleID = "transfer-recovery"
	RecoveryEvery      = 5 * time.Minute
	StaleAfter         = 10 * time.Minute
)

// RecoverTransfers resolves the claims left pending: it starts the workflow of a claim whose
// workflow never started, marks failed a transfer whose run ended without posting it, and
// starts again a payout whose run failed with its money held (transfers.Service.ResolveStale,
// payouts.Service.ResolveStale). Each pass shows in the Temporal UI under its Schedule.
func RecoverTransfers(ctx workflow.Context) (activities.StaleResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Minute})
	var a *activities.Activities
	var res activities.StaleResult
	err := workflow.ExecuteActivity(ctx, a.ResolveStaleTransfers, activities.Duration(StaleAfter)).Get(ctx, &res)
	return res, err
}
