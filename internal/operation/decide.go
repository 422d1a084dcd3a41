package operation

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Decision is a request that decides an operation already running (a capture or a void of an
// authorization): it has an idempotency scope of its own but no run; it is an Update of the
// operation's run, which stops waiting once a decision wins. The ledger decides, under the
// operation's lock, and stores each decision's answer under its scope, so a duplicate, a retry
// or a race of decisions ends with one winner and every answer final.
type Decision struct {
	Scope       idempotency.Scope
	Fingerprint []byte
	Kind        Kind
	ID          string // the operation decided on
	WorkflowID  string // its run's
	Update      string // the Update that carries the decision; its result is the stored answer
	Arg         any
	// OtherRun is the error type the run's validator refuses a decision with when it runs another
	// operation (a later use of its key).
	OtherRun string
	// Closed decides in the ledger when no run takes the Update (it has closed: the operation has
	// ended, so the ledger answers that the decision came too late).
	Closed func(ctx context.Context) (idempotency.Response, error)
}

// Decide claims d's scope and answers with the decision's answer: stored already (replayed),
// given by the run, or, when the operation's run has closed, by d.Closed. A decision the run has
// not answered within SyncWait is an InUseError: the same key asks again.
func (r *Runner) Decide(ctx context.Context, d Decision) (resp idempotency.Response, replayed bool, err error) {
	var rec idempotency.Record
	var created bool
	err = r.Claims.InTx(ctx, func(tx pgx.Tx) (err error) {
		rec, created, err = idempotency.Claim(ctx, tx, d.Scope, d.Fingerprint, d.ID)
		return err
	})
	if err != nil {
		return resp, false, database.Outage(err)
	}
	if rec.Response != nil {
		return *rec.Response, !created, nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, r.SyncWait)
	defer cancel()
	h, err := r.Client.UpdateWorkflow(waitCtx, client.UpdateWorkflowOptions{
		WorkflowID: d.WorkflowID, UpdateID: updateID(d.Scope.WorkflowID()), UpdateName: d.Update,
		Args: []any{d.Arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(waitCtx, &resp)
	}
	var closed *serviceerror.NotFound
	var refused *temporal.ApplicationError
	switch {
	case err == nil:
		return resp, !created, nil
	case errors.As(err, &closed) || (errors.As(err, &refused) && refused.Type() == d.OtherRun):
		resp, err = d.Closed(ctx)
		return resp, !created, database.Outage(err)
	case waitCtx.Err() != nil && ctx.Err() == nil:
		return resp, false, &InUseError{Kind: d.Kind, ID: d.ID, WorkflowID: d.WorkflowID}
	}
	return resp, false, TemporalError(err)
}
