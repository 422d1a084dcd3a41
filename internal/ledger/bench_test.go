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
// Temporal or HTTP; by 32 writers each between two accounts of its own owner (disjoint); with
// its events (seen by both owners), and without them, the baseline; and with every transfer from
// one hot account, the bound its row lock sets.
//
//	go test -run '^$' -bench Post -benchtime 5000x ./internal/ledger/
func BenchmarkPost(b *testing.B) {
	accs := make([]string, 16)
	for i := range accs {
		accs[i] = accountOf(b, fmt.Sprintf("%s/%d", b.Name(), i), "USD", 1<<40)
	}
	// Disjoint: each of 32 writers posts between two accounts of an owner of its own, so no
	// posting shares an account or an owner with another writer's: what one PostgreSQL gives
	// when nothing is contended but the commit itself.
	own := make([][2]string, 32)
	for w := range own {
		owner := fmt.Sprintf("%s/disjoint-%d", b.Name(), w)
		own[w] = [2]string{accountOf(b, owner, "USD", 1<<40), accountOf(b, owner, "USD", 0)}
	}
	spread := func(_ int, i int64) (string, string) {
		n := int64(len(accs))
		from, to := i%n, (i+1+i/n)%n
		if from == to {
			to = (to + 1) % n
		}
		return accs[from], accs[to]
	}
	hot := func(_ int, i int64) (string, string) { return accs[0], accs[1+i%int64(len(accs)-1)] }
	disjoint := func(w int, i int64) (string, string) {
		if i%2 == 0 {
			return own[w][0], own[w][1]
		}
		return own[w][1], own[w][0]
	}
	for _, shape := range []struct {
		name    string
		writers int
		pair    func(int, int64) (string, string)
	}{{"writers=8", 8, spread}, {"writers=32", 32, spread}, {"writers=32/disjoint", 32, disjoint}} {
		for _, events := range []bool{true, false} {
			lg, name := l, shape.name+"/events"
			if !events {
				lg, name = ledger.WithoutEvents(l), shape.name+"/no-events"
				eventsLeftOut = true
			}
			b.Run(name, func(b *testing.B) { postConcurrently(b, lg, shape.writers, shape.pair) })
		}
	}
	b.Run("writers=8/events/hot", func(b *testing.B) { postConcurrently(b, l, 8, hot) })
}

// eventsLeftOut says a baseline without events ran: its transfers have none, as reconcile
// (invariant 9) rightly says, so TestMain does not reconcile after it.
var eventsLeftOut bool

// postConcurrently posts b.N transfers of 1 from writers goroutines, the i-th (by writer w)
// between the accounts pair gives.
func postConcurrently(b *testing.B, lg *ledger.Ledger, writers int, pair func(w int, i int64) (from, to string)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				from, to := pair(w, i)
				if _, _, err := lg.Post(context.Background(), posting(from, to, 1), api.TransferAnswer); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "postings/s")
}
