// Package payins receives the bank's credits: each verified credit.received event runs, once,
// as the workflow payin/<bank event id>, which credits the account the event names.
package payins

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// Service receives payins.
type Service struct {
	Temporal  client.Client
	Converter converter.DataConverter // Temporal's data converter: reads a run's input to rerun it
	RetryFor  time.Duration           // how long crediting retries technical failures
}

// Receive starts the payin of a verified credit.received event, once: the workflow ID is the
// event's, and a run already there (the bank sent the event twice) is the same payin. It returns
// what became of the event, for the record. An error is Temporal unreachable: the bank is
// answered so, and sends the event again. A credit of an amount no account can take (not
// positive, or beyond money.MaxAmountMinor) is not run: it is recorded as rejected, the event
// kept for an operator. Any account number and currency are run: one that names no account of
// that currency is an unmatched payin, kept for an operator too.
func (s *Service) Receive(ctx context.Context, e bank.Event) (string, error) {
	if err := money.CheckAmount(e.Data.AmountMinor); err != nil {
		return "rejected: amount_minor " + err.Error(), nil
	}
	in := workflows.PayinInput{Credit: ledger.Credit{BankEventID: e.ID, AccountNumber: e.Data.AccountNumber,
		AmountMinor: e.Data.AmountMinor, Currency: e.Data.Currency, Reference: e.Data.Reference},
		RetryFor: config.Duration(s.RetryFor)}
	_, err := s.Temporal.ExecuteWorkflow(ctx, s.Options(in), workflows.Payin, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return "duplicate", nil
	}
	if err != nil {
		return "", operation.TemporalError(err)
	}
	return "payin started", nil
}

// Options are a payin run's: its ID is the bank event's; a run that completed is never
// repeated, one that failed may run again.
func (s *Service) Options(in workflows.PayinInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       idempotency.Scope{Route: idempotency.RoutePayin, Key: in.BankEventID}.WorkflowID(),
		TaskQueue:                                workflows.TaskQueue,
		WorkflowIDReusePolicy:                    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            workflows.PayinSummary(in),
	}
}

// RerunFailed finds the payin workflows whose latest run failed, was terminated or timed
// out,
// and runs each again: the ledger credits each bank event at most once however often this runs.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	decode := func(input func(any) error) (operation.Operation, error) {
		var in workflows.PayinInput
		err := input(&in)
		return operation.Operation{Options: s.Options(in), Workflow: workflows.Payin, Input: in, ID: in.BankEventID}, err
	}
	return operation.RerunFailed(ctx, s.Temporal, s.Converter, "Payin", since, decode, func(run client.WorkflowRun, r *operation.Rerun) {
		var out workflows.PayinOutcome
		if err := run.Get(ctx, &out); err != nil {
			r.Outcome, r.Detail = "failed", err.Error()
		} else {
			r.Outcome, r.Detail = out.Status, "payin "+out.PayinID
		}
	}, report)
}
