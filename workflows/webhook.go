package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/config"
)

// WebhookInput is what an endpoint's delivery workflow takes; the failing event, since when and
// its attempts are carried across continue-as-new.
type WebhookInput struct {
	EndpointID   string
	RetryFor     config.Duration
	FailingSince time.Time
	Attempt      int
	FailingEvent string `json:",omitempty"`
}

// Search attributes of a delivery workflow: its endpoint, and the event type and HTTP status of
// its latest attempt that did not deliver (0: no answer), then the 2xx once one delivers again.
var (
	WebhookEndpoint  = temporal.NewSearchAttributeKeyKeyword("WebhookEndpoint")
	WebhookEventType = temporal.NewSearchAttributeKeyKeyword("WebhookEventType")
	WebhookStatus    = temporal.NewSearchAttributeKeyInt64("WebhookStatus")
)

// WakeSignal tells a delivery workflow that new events wait for it.
const WakeSignal = "wake"

// ErrTypeGaveUp is a delivery run that tried an event for RetryFor without the endpoint taking
// it: `payments rerun failed` starts it again, from that event.
const ErrTypeGaveUp = "WebhookGaveUp"

// DefaultWebhookRetryFor is PAYMENTS_WEBHOOK_RETRY_FOR's default.
const DefaultWebhookRetryFor = 72 * time.Hour

// A run continues as new after webhookBatchesPerRun batches, webhookSignalsPerRun wake signals
// (Temporal refuses signals past 10,000, which would leave an idle run deaf), or when suggested.
const (
	webhookBatchesPerRun = 200
	webhookSignalsPerRun = 1000
)

// WebhookDelivery delivers one endpoint's events in commit order while the endpoint exists, a
// batch per activity, sleeping until a wake signal. An event not taken is retried after 1 s, 2 s,
// 4 s, … (at most an hour apart); after RetryFor the run fails, and the events behind it wait in
// PostgreSQL for `payments rerun failed`. Deleting the endpoint cancels the run.
func WebhookDelivery(ctx workflow.Context, in WebhookInput) error {
	var a *activities.Activities
	wake := workflow.GetSignalChannel(ctx, WakeSignal)
	retryFor := time.Duration(in.RetryFor)
	if retryFor <= 0 {
		retryFor = DefaultWebhookRetryFor
	}
	signals := 0
	for batch := 0; batch < webhookBatchesPerRun && signals < webhookSignalsPerRun &&
		!workflow.GetInfo(ctx).GetContinueAsNewSuggested(); batch++ {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Minute,
			// A batch whose worker died is tried again within seconds, not minutes.
			HeartbeatTimeout: activities.WebhookHeartbeat,
			// Only the ledger being unreachable, or the batch's worker dying, fails the activity:
			// try again, for as long as it takes, soon (a worker dies and a batch waits behind it).
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 2 * time.Second},
			Summary:     deliverySummary(in),
		})
		var b activities.WebhookBatch
		if err := workflow.ExecuteActivity(actx, a.DeliverWebhooks, in.EndpointID).Get(ctx, &b); err != nil {
			return err
		}
		if b.Deleted {
			return nil
		}
		if b.Delivered > 0 && in.Attempt > 0 { // the event it was stuck on went through
			in.FailingSince, in.Attempt, in.FailingEvent = time.Time{}, 0, ""
			_ = workflow.UpsertTypedSearchAttributes(ctx, WebhookStatus.ValueSet(int64(b.Status)))
		}
		if b.Failed != nil {
			if err := retryLater(ctx, &in, *b.Failed, retryFor); err != nil {
				return err
			}
			continue
		}
		woken := drain(wake)
		signals += woken
		if b.More || woken > 0 {
			continue
		}
		woken, err := sleepUntilWoken(ctx, wake)
		if err != nil {
			return err
		}
		signals += woken
	}
	drain(wake) // the next run reads the outbox first: a wake now is not lost
	return workflow.NewContinueAsNewError(ctx, WebhookDelivery, in)
}

// retryLater records an attempt that did not deliver and waits before the next, or gives up once
// the event has been failing for retryFor. The backoff is the event's: one failing after another
// went through in a batch that did not return it (its worker died) starts from the first wait.
func retryLater(ctx workflow.Context, in *WebhookInput, f activities.WebhookAttempt, retryFor time.Duration) error {
	now := workflow.Now(ctx)
	if workflow.GetVersion(ctx, perEventBackoffChange, workflow.DefaultVersion, 1) == 1 {
		if in.FailingEvent != "" && in.FailingEvent != f.EventID {
			in.FailingSince, in.Attempt = time.Time{}, 0
		}
		in.FailingEvent = f.EventID
	}
	if in.FailingSince.IsZero() {
		in.FailingSince = now
	}
	in.Attempt += max(f.Tries, 1)
	_ = workflow.UpsertTypedSearchAttributes(ctx, WebhookEventType.ValueSet(f.EventType), WebhookStatus.ValueSet(int64(f.Status)))
	left := retryFor - now.Sub(in.FailingSince)
	if left <= 0 {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"gave up delivering %s (%s) to %s after %d attempts over %s: %s", f.EventID, f.EventType, in.EndpointID,
			f.Attempts, retryFor, f.Error), ErrTypeGaveUp, nil)
	}
	wait := min(WebhookBackoff(in.Attempt), left)
	return workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{
		Summary: fmt.Sprintf("%s not delivered (%s); next attempt in %s", f.EventID, f.Error, wait),
	}).Get(ctx, nil)
}

// perEventBackoffChange gates the backoff kept per event (retryLater): before it, a run's
// attempts added up across events that failed one after another without a batch returning a
// delivery between them, and an event could wait an hour before its first retry.
const perEventBackoffChange = "webhook-backoff-per-event"

// WebhookBackoff is the wait before attempt n+1 of an event that attempt n did not deliver:
// 1 s, 2 s, 4 s, … at most an hour.
func WebhookBackoff(n int) time.Duration {
	if n > 12 {
		return time.Hour
	}
	return min(time.Second<<max(n-1, 0), time.Hour)
}

// drain takes every wake signal waiting and returns how many there were.
func drain(wake workflow.ReceiveChannel) int {
	n := 0
	for wake.ReceiveAsync(nil) {
		n++
	}
	return n
}

// sleepUntilWoken waits for a wake signal, or for the run to be canceled (its endpoint deleted),
// and returns how many signals it took. A lost signal is made up by the recovery pass.
func sleepUntilWoken(ctx workflow.Context, wake workflow.ReceiveChannel) (int, error) {
	n := 0
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(wake, func(c workflow.ReceiveChannel, _ bool) { n = drain(c) })
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
	sel.Select(ctx)
	return n, ctx.Err()
}

func deliverySummary(in WebhookInput) string {
	if in.Attempt == 0 {
		return "deliver pending events to " + in.EndpointID
	}
	return fmt.Sprintf("attempt %d at %s's oldest pending event, failing since %s", in.Attempt+1, in.EndpointID,
		in.FailingSince.UTC().Format(time.RFC3339))
}

// WebhookSearchAttributes are the attributes a delivery workflow starts with.
func WebhookSearchAttributes(endpointID string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(WebhookEndpoint.ValueSet(endpointID))
}
