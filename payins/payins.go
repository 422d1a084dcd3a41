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

// Receive starts the payin of a verified credit.received event once (the workflow ID is the
// event's), and returns what became of it; an error is Temporal unreachable. An amount no account
// can take is rejected, not run; an unknown account number is run, as an unmatched payin.
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

// Options are a payin run's, under the bank event's ID: never repeated once completed.
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

// RerunFailed runs again the payin workflows whose latest run failed, was terminated or timed
// out: the ledger credits each bank event at most once however often this runs.
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
