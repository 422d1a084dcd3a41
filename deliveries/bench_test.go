package deliveries_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/api"
	"github.com/payments/payments/deliveries"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/testenv"
)

// BenchmarkDeliveries measures what delivering costs: b.N transfers are posted straight to the
// ledger (as their workflows' activities post them) by 8 writers, each appending its event and a
// delivery to one endpoint; the benchmark ends when the receiver has them all. It reports
// deliveries/s (first commit to last delivery) and the Temporal history events the endpoint's
// workflow wrote per delivery (all its runs, continue-as-new included).
//
//	go test -run '^$' -bench Deliveries -benchtime 2000x ./webhooks/
func BenchmarkDeliveries(b *testing.B) {
	ownerID, _, accs, endpoint, delivered := subscribed(b)
	svc := &deliveries.Service{Ledger: env.Ledger, Temporal: env.Temporal, Converter: testenv.Converter, RetryFor: time.Hour}
	b.ResetTimer()
	start := time.Now()
	post(b, &ledger.Ledger{DB: env.DB, Wake: svc.Wake}, ownerID, accs)
	posted := time.Since(start)
	testenv.WaitFor(b, "every event delivered", func() bool { return delivered.Load() >= int64(b.N) })
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(b.N)/posted.Seconds(), "events/s")
	b.ReportMetric(float64(historyEvents(b, deliveries.WorkflowID(endpoint)))/float64(b.N), "history-events/delivery")
}

// BenchmarkBacklog measures draining a burst: b.N events are committed while the endpoint's
// workflow sleeps (nothing wakes it), then one wake signal; it reports how fast the backlog is
// delivered and the history events per delivery.
//
//	go test -run '^$' -bench Backlog -benchtime 10000x ./webhooks/
func BenchmarkBacklog(b *testing.B) {
	ownerID, _, accs, endpoint, delivered := subscribed(b)
	post(b, &ledger.Ledger{DB: env.DB}, ownerID, accs)
	before := historyEvents(b, deliveries.WorkflowID(endpoint))
	b.ResetTimer()
	start := time.Now()
	if err := env.Temporal.SignalWorkflow(context.Background(), deliveries.WorkflowID(endpoint), "", "wake", nil); err != nil {
		b.Fatal(err)
	}
	testenv.WaitFor(b, "every event delivered", func() bool { return delivered.Load() >= int64(b.N) })
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(historyEvents(b, deliveries.WorkflowID(endpoint))-before)/float64(b.N), "history-events/delivery")
}

// subscribed makes an owner with two funded accounts and an endpoint on a receiver that counts
// what it is delivered.
func subscribed(b *testing.B) (ownerID, key string, accs []string, endpoint string, delivered *atomic.Int64) {
	ownerID, key = env.Owner(b)
	accs = env.FundedAccounts(b, key, 2, int64(b.N)*10)
	delivered = new(atomic.Int64)
	r := newReceiver(b, func(int) int { delivered.Add(1); return 200 })
	endpoint = r.subscribe(b, env, key, "transfer.completed")
	return ownerID, key, accs, endpoint, delivered
}

// post posts b.N transfers between accs straight to l, from 8 writers, as the transfer
// workflows' activities would.
func post(b *testing.B, l *ledger.Ledger, ownerID string, accs []string) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteTransfers, Key: fmt.Sprintf("%s-%d-%d", b.Name(), b.N, i)}
				p := ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(), From: accs[i%2], To: accs[1-i%2],
					AmountMinor: 1, Currency: "USD", Scope: scope, ReplayFor: config.Duration(time.Hour)}
				if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// historyEvents counts the history events of every run of workflowID.
func historyEvents(b *testing.B, workflowID string) int {
	resp, err := env.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = '%s'", workflowID)})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, ex := range resp.GetExecutions() {
		it := env.Temporal.GetWorkflowHistory(context.Background(), workflowID, ex.GetExecution().GetRunId(), false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			if _, err := it.Next(); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	return n
}
