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

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/runs"
	"github.com/payments/payments/workflows"
)

// Service receives payins.
type Service struct {
	Temporal client.Client
	RetryFor time.Duration // how long crediting retries technical failures
}

// Receive starts the payin of a verified credit.received event, once: the workflow ID is the
// event's, and a run already there (the bank sent the event twice) is the same payin. It returns
// what became of the event, for the record. An error is Temporal unreachable: the bank is
// answered so, and sends the event again.
func (s *Service) Receive(ctx context.Context, e bank.Event) (string, error) {
	in := workflows.PayinInput{Credit: activities.Credit{BankEventID: e.ID, AccountNumber: e.Data.AccountNumber,
		AmountMinor: e.Data.AmountMinor, Currency: e.Data.Currency, Reference: e.Data.Reference},
		RetryFor: activities.Duration(s.RetryFor)}
	_, err := s.Temporal.ExecuteWorkflow(ctx, s.Options(in), workflows.Payin, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return "duplicate", nil
	}
	if err != nil {
		return "", runs.TemporalError(err)
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
