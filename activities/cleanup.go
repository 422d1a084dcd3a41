package activities

import (
	"context"
	"time"

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

// StaleResult is what one recovery pass did with the transfers left pending.
type StaleResult struct {
	Started   int // claims whose workflow never started (or, a payout's, whose run failed): started now
	Failed    int // runs that ended without posting: their transfers marked failed
	Running   int // runs still open: left to finish
	Withdrawn int // claims refused while an earlier use of their key still runs: withdrawn (operation.Operation.Unclaim)
	Stopped   int // payouts whose run an operator terminated or canceled: left for `payments rerun failed`
	Skipped   int // claims under no idempotency scope: for reconcile to report
	Errors    int // claims that could not be resolved in this pass (the error says which): the next pass tries again
}

// Plus is the sum of two passes' results.
func (r StaleResult) Plus(o StaleResult) StaleResult {
	return StaleResult{Started: r.Started + o.Started, Failed: r.Failed + o.Failed, Running: r.Running + o.Running,
		Withdrawn: r.Withdrawn + o.Withdrawn, Stopped: r.Stopped + o.Stopped, Skipped: r.Skipped + o.Skipped,
		Errors: r.Errors + o.Errors}
}

// StaleResolver resolves the transfers pending for longer than olderThan (transfers.Service).
type StaleResolver interface {
	ResolveStale(ctx context.Context, olderThan time.Duration) (StaleResult, error)
}

// ResolveStaleTransfers resolves the transfers whose claims have been pending for longer than
// olderThan: no claim stays pending for ever.
func (a *Activities) ResolveStaleTransfers(ctx context.Context, olderThan Duration) (StaleResult, error) {
	return a.Stale.ResolveStale(ctx, time.Duration(olderThan))
}
