// Package deliveries runs the delivery of events to clients' webhook endpoints: one workflow per
// endpoint (webhook-delivery/<endpoint id>) drains the endpoint's outbox, which the ledger fills
// in the transaction of each change (docs/contract.md §7, ADR 0009).
package deliveries

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/outage"
	"github.com/payments/payments/workflows"
)

// Service starts, wakes, stops and re-runs the endpoints' delivery workflows.
type Service struct {
	Ledger    *ledger.Ledger
	Temporal  client.Client
	Converter converter.DataConverter // Temporal's data converter: reads a run's input to rerun it
	RetryFor  time.Duration           // PAYMENTS_WEBHOOK_RETRY_FOR
	Log       *slog.Logger

	mu     sync.Mutex
	waking map[string]bool // endpoints with a wake signal on its way; true: send another after it
}

// WorkflowID is the ID of endpoint's delivery workflow.
func WorkflowID(endpointID string) string { return "webhook-delivery/" + endpointID }

// Options are a delivery run's: one per endpoint. A run that failed (gave up on an event) may
// run again, by `payments rerun failed`; one that ended because the endpoint was deleted may not.
func (s *Service) Options(endpointID string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       WorkflowID(endpointID),
		TaskQueue:                workflows.TaskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    workflows.WebhookSearchAttributes(endpointID),
		StaticSummary:            "webhook deliveries to endpoint " + endpointID,
	}
}

func (s *Service) input(endpointID string) workflows.WebhookInput {
	return workflows.WebhookInput{EndpointID: endpointID, RetryFor: config.Duration(s.RetryFor)}
}

// Start starts endpoint's delivery workflow, unless a run of it exists: running (it is joined),
// or ended (gave up: for `payments rerun failed`; canceled: the endpoint is deleted).
func (s *Service) Start(ctx context.Context, endpointID string) error {
	_, err := s.start(ctx, endpointID)
	return err
}

// start is Start, saying what it did: Started (or joined a run going), or Stopped (run ended).
func (s *Service) start(ctx context.Context, endpointID string) (operation.Outcome, error) {
	opts := s.Options(endpointID)
	opts.WorkflowIDReusePolicy = enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	// Told, not handed the closed run as though it had started (the SDK's default).
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	_, err := s.Temporal.ExecuteWorkflow(ctx, opts, workflows.WebhookDelivery, s.input(endpointID))
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &already):
		return operation.Stopped, nil
	case err != nil:
		return "", operation.TemporalError(err)
	}
	return operation.Started, nil
}

// ensure wakes endpoint's delivery workflow, or starts it when it has never run (its start after
// the endpoint was created did not happen): Running, Started, or Stopped (the latest run ended).
func (s *Service) ensure(ctx context.Context, endpointID string) (operation.Outcome, error) {
	err := s.Temporal.SignalWorkflow(ctx, WorkflowID(endpointID), "", workflows.WakeSignal, nil)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return s.start(ctx, endpointID)
	}
	return operation.Running, operation.TemporalError(err)
}

// Wake tells the delivery workflows of endpoints that new events wait for them. It returns at
// once: the signals go in the background, one at a time per endpoint, so a burst costs a few. A
// failed one is retried for a while; a lost one is made up for by the recovery pass.
func (s *Service) Wake(endpointIDs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waking == nil {
		s.waking = map[string]bool{}
	}
	for _, id := range endpointIDs {
		if _, sending := s.waking[id]; sending {
			s.waking[id] = true
			continue
		}
		s.waking[id] = false
		go s.signal(id)
	}
}

// signal sends id's wake signals while Wakes keep coming: after each it holds the endpoint's slot
// for a growing spacing, the Wakes meanwhile one signal at its end; a spacing without one ends it.
func (s *Service) signal(id string) {
	var failing time.Time // since when the wake has failed, if it has
	spacing := wakeEvery
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.ensure(ctx, id)
		cancel()
		retry, wait := false, spacing
		spacing = min(2*spacing, wakeEveryBusy)
		switch {
		case err == nil:
			failing = time.Time{}
		case isOutage(err) && (failing.IsZero() || time.Since(failing) < wakeRetryFor): // Temporal away for a moment
			failing, retry, wait = cmp.Or(failing, time.Now()), true, wakeRetry
		case s.Log != nil:
			s.Log.Warn("waking a webhook delivery workflow failed; the recovery pass will", "endpoint", id, "err", err)
		}
		time.Sleep(wait) // the run is busy delivering: what commits meanwhile it reads anyway
		s.mu.Lock()
		if again := s.waking[id] || retry; !again {
			delete(s.waking, id)
			s.mu.Unlock()
			return
		}
		s.waking[id] = false
		s.mu.Unlock()
	}
}

func isOutage(err error) bool { _, ok := outage.As(err); return ok }

// wakeEvery spaces one endpoint's wake signals, doubling up to wakeEveryBusy while events keep
// coming: each is an event and a workflow task in the run's history, so a run busy for minutes
// takes a few hundred, not thousands. What commits between two signals the run reads anyway.
const (
	wakeEvery     = 100 * time.Millisecond
	wakeEveryBusy = time.Second
)

// A failed wake is sent again every wakeRetry for wakeRetryFor: its events would otherwise wait
// for the recovery pass, minutes away, unless another event woke the run.
const (
	wakeRetry    = time.Second
	wakeRetryFor = 2 * time.Minute
)

// Delete deletes ownerID's endpoint id (ledger.ErrNotFound if none) and its pending deliveries,
// then cancels its delivery run (which would stop at its next batch anyway).
func (s *Service) Delete(ctx context.Context, ownerID, id string) error {
	if err := s.Ledger.DeleteEndpoint(ctx, ownerID, id); err != nil {
		return err
	}
	err := s.Temporal.CancelWorkflow(ctx, WorkflowID(id), "")
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) && s.Log != nil {
		s.Log.Warn("canceling a deleted endpoint's delivery run failed; it stops at its next batch", "endpoint", id, "err", err)
	}
	return nil
}

// ResolveStale wakes, or starts, the delivery runs of endpoints with deliveries pending for longer
// than olderThan. A run that gave up (or was canceled) is Stopped, left to `rerun failed`.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (operation.Tally, error) {
	var res operation.Tally
	ids, err := s.Ledger.EndpointsBehind(ctx, olderThan)
	if err != nil {
		return res, err
	}
	for _, id := range ids {
		outcome, err := s.ensure(ctx, id)
		if err == nil && outcome == operation.Stopped {
			outcome, err = s.restartCompleted(ctx, id)
		}
		res.Note("endpoint "+id, outcome, err)
	}
	return res, res.Err(nil)
}

// restartCompleted starts endpointID's delivery workflow again if its latest run completed: a run
// completes only when its endpoint is deleted, and this one exists, so nothing else would deliver.
func (s *Service) restartCompleted(ctx context.Context, endpointID string) (operation.Outcome, error) {
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, WorkflowID(endpointID), "")
	if err != nil {
		return "", operation.TemporalError(err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		return operation.Stopped, nil
	}
	opts := s.Options(endpointID)
	opts.WorkflowIDReusePolicy = enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	if _, err := s.Temporal.ExecuteWorkflow(ctx, opts, workflows.WebhookDelivery, s.input(endpointID)); err != nil {
		return "", operation.TemporalError(err)
	}
	if s.Log != nil {
		s.Log.Warn("a webhook delivery workflow had completed while its endpoint exists; started again", "endpoint", endpointID)
	}
	return operation.Started, nil
}

// RerunFailed starts again the delivery workflows whose latest run failed (gave up on an event),
// was terminated or timed out, from the event it stopped at, with a new PAYMENTS_WEBHOOK_RETRY_FOR.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	decode := func(input func(any) error) (operation.Operation, error) {
		var in workflows.WebhookInput
		err := input(&in)
		in = s.input(in.EndpointID)
		return operation.Operation{Options: s.Options(in.EndpointID), Workflow: workflows.WebhookDelivery, Input: in, ID: in.EndpointID}, err
	}
	return operation.RerunFailed(ctx, s.Temporal, s.Converter, "WebhookDelivery", since, decode, nil, report)
}
