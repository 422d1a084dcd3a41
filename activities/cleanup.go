package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/payments/payments/internal/idempotency"
)

// CleanupResult is what one cleanup pass did.
type CleanupResult struct {
	Deleted int64 // expired records deleted: their keys are new again
}

const cleanupBatch = 1000

// DeleteExpiredRecords deletes the idempotency records whose replay window has passed, in
// batches so that no transaction grows large, heartbeating between them.
func (a *Activities) DeleteExpiredRecords(ctx context.Context) (CleanupResult, error) {
	var res CleanupResult
	for {
		n, err := idempotency.DeleteExpired(ctx, a.Ledger.DB, cleanupBatch)
		res.Deleted += n
		if err != nil || n < cleanupBatch {
			return res, err
		}
		activity.RecordHeartbeat(ctx, res)
	}
}
