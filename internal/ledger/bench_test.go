package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/ledger"
)

// BenchmarkPost measures the ledger's own throughput: b.N transfers among 16 accounts, each of
// an owner of its own, posted by 8 or 32 writers, each a whole posting transaction without
// Temporal or HTTP; with its events (seen by both owners), and without them, the baseline; and
// with every transfer from one hot account, the bound its row lock sets.
//
//	go test -run '^$' -bench Post -benchtime 5000x ./internal/ledger/
func BenchmarkPost(b *testing.B) {
	accs := make([]string, 16)
	for i := range accs {
		accs[i] = accountOf(b, fmt.Sprintf("%s/%d", b.Name(), i), "USD", 1<<40)
	}
	for _, writers := range []int{8, 32} {
		for _, events := range []bool{true, false} {
			lg, name := l, fmt.Sprintf("writers=%d/events", writers)
			if !events {
				lg, name = ledger.WithoutEvents(l), fmt.Sprintf("writers=%d/no-events", writers)
				eventsLeftOut = true
			}
			b.Run(name, func(b *testing.B) { postConcurrently(b, lg, accs, writers, false) })
		}
	}
	b.Run("writers=8/events/hot", func(b *testing.B) { postConcurrently(b, l, accs, 8, true) })
}

// eventsLeftOut says a baseline without events ran: its transfers have none, as reconcile
// (invariant 9) rightly says, so TestMain does not reconcile after it.
var eventsLeftOut bool

// postConcurrently posts b.N transfers of 1 from writers goroutines, each from one account of
// accs to another, spread over every pair, or all from accs[0] when hot.
func postConcurrently(b *testing.B, lg *ledger.Ledger, accs []string, writers int, hot bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	n := int64(len(accs))
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				from, to := i%n, (i+1+i/n)%n
				if hot {
					from = 0
				}
				if from == to {
					to = (to + 1) % n
				}
				if _, _, err := lg.Post(context.Background(), posting(accs[from], accs[to], 1), api.TransferAnswer); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "postings/s")
}
