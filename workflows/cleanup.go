package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
)

// CleanupScheduleID is the Temporal Schedule that runs IdempotencyCleanup every CleanupEvery.
const (
	CleanupScheduleID = "idempotency-cleanup"
	CleanupEvery      = time.Hour
)

// IdempotencyCleanup deletes the idempotency records whose replay window has passed, so that
// their keys may start new operations; its Schedule shows every pass in the Temporal UI.
func IdempotencyCleanup(ctx workflow.Context) (activities.CleanupResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Minute,
		HeartbeatTimeout:    time.Minute,
	})
	var a *activities.Activities
	var res activities.CleanupResult
	err := workflow.ExecuteActivity(ctx, a.DeleteExpiredRecords).Get(ctx, &res)
	return res, err
}
