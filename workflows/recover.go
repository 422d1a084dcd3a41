package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/operation"
)

// The recovery Schedule: every RecoveryEvery, RecoverTransfers resolves the claims still pending
// after StaleAfter, so that none stays pending longer than both (ledger.PendingBound). The
// Schedule, workflow and activity keep the names they had when they served transfers only:
// histories and running deployments know them by these names (ADR 0011).
const (
	RecoveryScheduleID = "transfer-recovery"
	RecoveryEvery      = 5 * time.Minute
	StaleAfter         = 10 * time.Minute
)

// RecoverTransfers resolves the claims left pending (each service's ResolveStale); each pass
// shows in the Temporal UI under its Schedule.
func RecoverTransfers(ctx workflow.Context) (operation.Tally, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Minute})
	var res operation.Tally
	err := workflow.ExecuteActivity(ctx, RecoveryActivity, config.Duration(StaleAfter)).Get(ctx, &res)
	return res, err
}

// RecoveryActivity is the name the recovery pass (operation.Recovery.ResolveStale, which the
// worker registers) runs under, as histories know it.
const RecoveryActivity = "ResolveStaleTransfers"
