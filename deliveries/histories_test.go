package deliveries_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/payments/payments/deliveries"
	"github.com/payments/payments/rig/testenv"
)

// TestRecordHistories writes real histories of the WebhookDelivery workflow (an endpoint
// that refused once, delivered, and was deleted; one that never answered and gave up), which
// workflows' tests replay against every later change. Run it when the workflow changes, with a
// new version suffix (testenv.RecordCommand), and keep the old files.
func TestRecordHistories(t *testing.T) {
	testenv.SkipUnlessRecording(t)
	_, alice := env.Owner(t)
	accs := env.FundedAccounts(t, alice, 2, 1_000)

	flaky := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	recovered := flaky.subscribe(t, env, alice, "transfer.completed")
	transfer(t, alice, t.Name()+"-1", accs[0], accs[1], 10)
	testenv.WaitFor(t, "the event delivered", func() bool { return len(flaky.delivered()) == 1 })
	if r := env.Do(t, "DELETE", "/v1/webhook-endpoints/"+recovered, alice, "", ""); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", r.Status)
	}
	env.RecordHistory(t, testenv.WebhookHistory, "recovered", deliveries.WorkflowID(recovered), "")

	api := env.With(t, testenv.Options{WebhookRetryFor: 3 * time.Second})
	dead := newReceiver(t, nil)
	dead.mu.Lock()
	dead.delay = 3 * time.Second
	dead.mu.Unlock()
	gaveUp := dead.subscribe(t, api, alice, "transfer.completed")
	transfer(t, alice, t.Name()+"-2", accs[1], accs[0], 10)
	env.RecordHistory(t, testenv.WebhookHistory, "gave-up", deliveries.WorkflowID(gaveUp), "")
	if r := env.Do(t, "DELETE", "/v1/webhook-endpoints/"+gaveUp, alice, "", ""); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", r.Status)
	}
}
