package ledger_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/payments/payments/api"
)

// BenchmarkPost measures the ledger's own throughput: b.N transfers among 16 accounts posted by 8
// writers, each a whole posting transaction (its event included, where events exist), without
// Temporal or HTTP.
//
//	go test -run '^$' -bench Post -benchtime 5000x ./internal/ledger/
func BenchmarkPost(b *testing.B) {
	accs := make([]string, 16)
	for i := range accs {
		accs[i] = account(b, "USD", 1<<40)
	}
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				from, to := i%16, (i+1+i/16)%16
				if from == to {
					to = (to + 1) % 16
				}
				if _, _, err := l.Post(context.Background(), posting(accs[from], accs[to], 1), api.TransferAnswer); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "postings/s")
}
