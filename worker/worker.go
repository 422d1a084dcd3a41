// Package worker runs the workflows and activities on the transfer task queue, and keeps the
// idempotency cleanup scheduled.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// New returns a worker for the transfer task queue; the caller starts and stops it.
// app assembles acts and the recovery pass (the services that resolve their claims left pending); a worker without the ledger or the answers it stores would fail
// every posting, so it is refused here, at start.
func New(c client.Client, acts *activities.Activities, recovery operation.Recovery) sdkworker.Worker {
	if acts.Ledger == nil || acts.Answer == nil || acts.PayoutAnswer == nil || acts.AuthorizationAnswer == nil || acts.Bank == nil ||
		acts.Webhooks == nil || acts.ScheduledAnswer == nil || acts.Occurrences == nil || len(recovery) == 0 {
		panic("worker.New: activities need Ledger, Answer, PayoutAnswer, AuthorizationAnswer, Bank, Webhooks, ScheduledAnswer and Occurrences, and the recovery its services (app assembles them)")
	}
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{MaxHeartbeatThrottleInterval: HeartbeatThrottle})
	registerWorkflows(w)
	w.RegisterActivity(acts)
	w.RegisterActivityWithOptions(recovery.ResolveStale, activity.RegisterOptions{Name: workflows.RecoveryActivity})
	return w
}

// HeartbeatThrottle is the longest the worker holds an activity's heartbeat back. The SDK's
// default is 80% of the heartbeat timeout: one heartbeat that fails then (Temporal restarting) and
// a webhook batch whose worker is alive is timed out and its endpoint waits for the retry.
const HeartbeatThrottle = time.Second

// registerWorkflows registers every workflow under the name running executions know it by.
func registerWorkflows(r sdkworker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.Transfer, workflow.RegisterOptions{Name: "Transfer"})
	r.RegisterWorkflowWithOptions(workflows.Payout, workflow.RegisterOptions{Name: "Payout"})
	r.RegisterWorkflowWithOptions(workflows.Payin, workflow.RegisterOptions{Name: "Payin"})
	r.RegisterWorkflowWithOptions(workflows.WebhookDelivery, workflow.RegisterOptions{Name: "WebhookDelivery"})
	r.RegisterWorkflowWithOptions(workflows.Authorization, workflow.RegisterOptions{Name: "Authorization"})
	r.RegisterWorkflowWithOptions(workflows.ScheduledTransfer, workflow.RegisterOptions{Name: "ScheduledTransfer"})
	r.RegisterWorkflow(workflows.IdempotencyCleanup)
	r.RegisterWorkflow(workflows.RecoverTransfers)
	r.RegisterWorkflow(workflows.CreditBankReturns)
}

// ReplayHistory replays a workflow history exported as JSON (`temporal workflow show --output
// json`, or the Web UI's download) against the workflow code of this build. An error means the
// code would not reproduce that execution: a change that breaks running workflows. The SDK's
// message names the history event where replay diverged. Payloads sealed by the payload codec
// are opened with keys (PAYMENTS_CODEC_KEYS); those of histories from before it need none.
func ReplayHistory(file string, keys *keyring.Ring) error {
	var opts sdkworker.WorkflowReplayerOptions
	if keys != nil {
		opts.DataConverter = codec.DataConverter(keys)
		opts.FailureConverter = codec.FailureConverter(opts.DataConverter)
	}
	r, err := sdkworker.NewWorkflowReplayerWithOptions(opts)
	if err != nil {
		return err
	}
	registerWorkflows(r)
	return r.ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), file)
}

// EnsureSchedules creates the recurring Schedules that are missing: the idempotency cleanup,
// the recovery of claims left pending (transfers and payouts), and the reading of the bank's
// statement for returns (payouts). Every worker calls it at start; the first one creates them.
func EnsureSchedules(ctx context.Context, c client.Client) error {
	for _, sch := range []struct {
		id       string
		every    time.Duration
		workflow any
	}{
		{workflows.CleanupScheduleID, workflows.CleanupEvery, workflows.IdempotencyCleanup},
		{workflows.RecoveryScheduleID, workflows.RecoveryEvery, workflows.RecoverTransfers},
		{workflows.StatementScheduleID, workflows.StatementEvery, workflows.CreditBankReturns},
	} {
		_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
			ID:      sch.id,
			Spec:    client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: sch.every}}},
			Overlap: enums.SCHEDULE_OVERLAP_POLICY_SKIP,
			Action: &client.ScheduleWorkflowAction{
				ID:        sch.id,
				Workflow:  sch.workflow,
				TaskQueue: workflows.TaskQueue,
			},
		})
		if err != nil && !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
			return fmt.Errorf("creating the %s schedule: %w", sch.id, err)
		}
	}
	return nil
}

// CheckSearchAttributes makes sure namespace has the search attributes transfer and payout
// workflows set, and says how to register the missing ones. Where the cluster does not let this
// client list them (Temporal Cloud manages them in its own console), it says nothing.
func CheckSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	var denied *serviceerror.PermissionDenied
	var unimplemented *serviceerror.Unimplemented
	if errors.As(err, &denied) || errors.As(err, &unimplemented) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the search attributes of namespace %s: %w", namespace, err)
	}
	var missing, args []string
	for _, name := range slices.Sorted(maps.Keys(workflows.SearchAttributeTypes)) {
		want := workflows.SearchAttributeTypes[name]
		if got, ok := resp.GetCustomAttributes()[name]; !ok || got != want {
			kind := strings.TrimPrefix(want.String(), "IndexedValueType")
			missing = append(missing, name+" ("+kind+")")
			args = append(args, "--name "+name+" --type "+kind)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("namespace %s lacks the search attributes %s that transfer workflows set; register them with:\n  temporal operator search-attribute create --namespace %s %s",
		namespace, strings.Join(missing, ", "), namespace, strings.Join(args, " "))
}
