package transfers

import (
	"context"
	"fmt"
	"time"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
)

// ResolveStale resolves the transfers pending for longer than olderThan (workflows.StaleAfter),
// so that no claim stays pending for ever and no key stays bound to a request nobody runs. A
// transfer's own run settles it within PAYMENTS_TRANSFER_RETRY_FOR, so one still pending is a
// claim whose workflow never started (the API died between the claim and the start, or
// Temporal was unreachable and the client never retried) or whose run ended without a word to
// the ledger (terminated by an operator):
//   - no run of the transfer exists: its run is started (the request was valid and accepted; the
//     client was told to retry, or never heard back);
//   - its run is still open: it is left to finish;
//   - a run of an earlier use of its key is still open: the claim is withdrawn (the client was
//     told 409, nothing done, or never heard back);
//   - its run ended without posting (terminated, timed out): the transfer is marked failed, as a
//     failed run would have, and the same request (or `payments rerun failed`) runs it again.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (operation.Tally, error) {
	var res operation.Tally
	err := s.Ledger.StalePending(ctx, olderThan, func(page []ledger.Transfer) error {
		for _, t := range page {
			outcome, err := s.resolve(ctx, t)
			res.Note(fmt.Sprintf("transfer %s (%s)", t.ID, t.WorkflowID), outcome, err)
		}
		return nil
	})
	return res, res.Err(err)
}

// resolve does what ResolveStale says for one transfer and says which.
func (s *Service) resolve(ctx context.Context, t ledger.Transfer) (operation.Outcome, error) {
	op := func(scope idempotency.Scope) operation.Operation {
		return s.operation(s.input(requestOf(scope, t), t.ID, t.WorkflowID))
	}
	return operation.Resolve(ctx, s.Ledger.DB, t.WorkflowID, t.ID, op, func(run operation.Classified) (operation.Outcome, error) {
		reason := "its workflow ended (" + run.Ended() + ") before posting it; no money moved"
		if _, err := s.Ledger.MarkFailed(ctx, t.ID, run.RunID, reason); err != nil {
			return "", err
		}
		return operation.Failed, nil
	})
}
