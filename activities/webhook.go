package activities

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/webhook"
)

// WebhookBatchSize is how many events one DeliverWebhooks sends at most: a backlog is drained a
// batch per activity, not an activity per event.
const WebhookBatchSize = 100

// WebhookBatch is what one pass over an endpoint's pending deliveries did: whether the batch was
// full (More), the endpoint deleted, and, when the endpoint did not take an event, that attempt.
type WebhookBatch struct {
	Delivered int
	Status    int // the HTTP status of the last delivery (a 2xx)
	More      bool
	Deleted   bool
	Failed    *WebhookAttempt
}

// WebhookAttempt is an attempt that did not deliver (Status 0: no answer came). Tries is how many
// of the Attempts this batch made (1 or 2; 0, meaning 1, in histories from before batch retries).
type WebhookAttempt struct {
	EventID   string
	EventType string
	Status    int
	Error     string
	Attempts  int
	Tries     int `json:",omitempty"`
}

// DeliverWebhooks sends endpoint's pending events in commit order, signed, recording each attempt
// as it happens (a worker dying mid-batch resends at most one event). An event not taken is tried
// once more after FirstRetry; then the batch stops there and the workflow backs off, so a dead
// endpoint costs one attempt per backoff, not one per event.
func (a *Activities) DeliverWebhooks(ctx context.Context, endpoint string) (WebhookBatch, error) {
	stop := heartbeatEvery(ctx, time.Second)
	defer stop()
	target, err := database.Outlast(ctx, WebhookOutageGrace, func() (ledger.Target, error) { return a.Ledger.Target(ctx, endpoint) })
	if errors.Is(err, ledger.ErrNotFound) || target.Deleted {
		return WebhookBatch{Deleted: true}, nil
	}
	if err != nil {
		return WebhookBatch{}, err
	}
	due, err := database.Outlast(ctx, WebhookOutageGrace, func() ([]ledger.Delivery, error) {
		return a.Ledger.PendingDeliveries(ctx, endpoint, WebhookBatchSize)
	})
	if err != nil {
		return WebhookBatch{}, err
	}
	out := WebhookBatch{More: len(due) == WebhookBatchSize}
	for _, d := range due {
		status, problem, canceled, err := a.attempt(ctx, target, d)
		tries := 1
		if problem != "" && d.Attempts == 0 && err == nil && !canceled {
			select { // the contract's first wait, without a round trip through the workflow
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(FirstRetry):
			}
			status, problem, canceled, err = a.attempt(ctx, target, d)
			tries, d.Attempts = 2, 1
		}
		if err != nil {
			return out, err
		}
		if canceled { // the endpoint was deleted while this batch ran: send it nothing more
			return WebhookBatch{Delivered: out.Delivered, Status: out.Status, Deleted: true}, nil
		}
		if problem != "" {
			out.More = false
			out.Failed = &WebhookAttempt{EventID: d.EventID, EventType: d.Type, Status: status, Error: problem,
				Attempts: d.Attempts + 1, Tries: tries}
			activity.GetLogger(ctx).Info("webhook not delivered", "endpoint", endpoint, "event_id", d.EventID,
				"status", status, "problem", problem, "attempts", d.Attempts+1)
			return out, nil
		}
		out.Delivered, out.Status = out.Delivered+1, status
	}
	return out, nil
}

// FirstRetry is the first of the contract's waits (1 s, 2 s, 4 s, …), which the batch waits
// itself; the later ones are the workflow's timers.
const FirstRetry = time.Second

// attempt sends d to target and records the attempt: the HTTP status and, when it was not
// delivered, why; canceled when the endpoint was deleted meanwhile.
func (a *Activities) attempt(ctx context.Context, target ledger.Target, d ledger.Delivery) (status int, problem string, canceled bool, err error) {
	status, problem = a.send(ctx, target, d)
	if ctx.Err() != nil { // canceled: the endpoint was deleted, or the worker is stopping
		return status, problem, false, ctx.Err()
	}
	canceled, err = database.Outlast(ctx, WebhookOutageGrace, func() (bool, error) {
		return a.Ledger.RecordAttempt(ctx, target.ID, d.Seq, problem == "", status, problem)
	})
	return status, problem, canceled, err
}

// WebhookOutageGrace is how long a batch waits for an unreachable PostgreSQL before it fails: a
// blip costs the batch a pause, not a resend of the event it has just sent and a backoff.
const WebhookOutageGrace = 10 * time.Second

// WebhookHeartbeat is how soon a batch whose worker died is tried elsewhere: an endpoint's events
// wait behind it meanwhile. It may be short: the batch heartbeats every second however long one
// send takes (a minute at most), and the worker sends each heartbeat on (worker.HeartbeatThrottle),
// so only a worker gone, or Temporal unreachable for most of it, times a batch out.
const WebhookHeartbeat = 8 * time.Second

// heartbeatEvery records the activity's heartbeat every interval until stop is called; stop
// returns once no heartbeat is being recorded any more.
func heartbeatEvery(ctx context.Context, interval time.Duration) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-exited }
}

// send posts one event to target and returns the HTTP status (0 when none came) and, when it
// was not delivered, why, in words that name neither the URL nor the secret.
func (a *Activities) send(ctx context.Context, target ledger.Target, d ledger.Delivery) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.URL, bytes.NewReader(d.Body))
	if err != nil {
		return 0, "the endpoint's URL cannot be used: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "payments-webhooks/1")
	req.Header.Set(webhook.EventIDHeader, d.EventID)
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(target.Secret, time.Now(), d.Body))
	resp, err := a.Webhooks.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, which may hold a token of the client's
		}
		return 0, "no answer: " + err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so that the connection is reused
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, "answered " + strconv.Itoa(resp.StatusCode)
	}
	return resp.StatusCode, ""
}
