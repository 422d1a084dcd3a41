package transfers

import (
	"context"
	"fmt"
	"time"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
)

// ResolveStale resolves the transfers pending for longer than olderThan, so that no key stays
// bound to a request nobody runs. One still pending never started (the API died after the claim)
// or ended without a word to the ledger (terminated): with no run it is started; an open run is
// left to finish; an earlier use's open run withdraws the claim (the client was told 409); a run
// that ended without posting marks it failed, as a failed run would have.
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
