// Package bench measures what a transfer costs: it drives the running HTTP API with concurrent
// clients and, in the same run against the same PostgreSQL and Temporal, the baselines a
// transfer is compared with (the ledger posting alone, an empty workflow started eagerly, and
// the tutorial shape of two regular activities). `payments bench` runs it.
package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config says what to run.
type Config struct {
	Clients    int           // concurrent clients in the load phases
	Duration   time.Duration // of each load phase
	Sequential time.Duration // of each one-client phase; 0 skips them
	Only       []string      // scenario ids to run (spread, hot, payout, replay, posting, empty, started, uws, tutorial); empty runs all
	Topology   string        // "serve" (the API and a worker in one process) or "split" (`payments api` apart from the workers)
	CPUOf      []string      // command-line prefixes whose CPU use each phase reports, e.g. "temporal server"
	Progress   io.Writer     // where the live progress line goes
}

// Phase is one measured load: a scenario at a number of clients.
type Phase struct {
	Scenario   string             `json:"scenario"`
	Clients    int                `json:"clients"`
	Requests   int                `json:"requests"`
	Errors     int                `json:"errors"`
	Seconds    float64            `json:"seconds"`
	PerSecond  float64            `json:"per_second"`
	P50Millis  float64            `json:"p50_ms"`
	P95Millis  float64            `json:"p95_ms"`
	P99Millis  float64            `json:"p99_ms"`
	FirstError string             `json:"first_error,omitempty"`
	CPUCores   map[string]float64 `json:"cpu_cores,omitempty"` // CPU used per watched process, in cores
}

// op is one request of a scenario; client is the caller's index, n counts its requests.
type op func(ctx context.Context, client, n int) error

// measure runs op with clients concurrent callers for d and summarises the latencies.
func measure(ctx context.Context, cfg Config, scenario string, clients int, d time.Duration, do op) Phase {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      atomic.Int32
		firstErr  atomic.Value
		done      atomic.Int64
	)
	cpu := startCPU(cfg.CPUOf)
	start := time.Now()
	deadline := start.Add(d)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		progress(cfg.Progress, scenario, clients, start, &done, stop)
	}()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			var mine []time.Duration
			for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				t0 := time.Now()
				if err := do(ctx, c, n); err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				done.Add(1)
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(stop)
	<-stopped // the progress line is written no more: the summary line follows it
	elapsed := time.Since(start).Seconds()
	slices.Sort(latencies)
	p := Phase{Scenario: scenario, Clients: clients, Requests: len(latencies), Errors: int(errs.Load()),
		Seconds: elapsed, PerSecond: float64(len(latencies)) / elapsed,
		P50Millis: quantile(latencies, 0.50), P95Millis: quantile(latencies, 0.95), P99Millis: quantile(latencies, 0.99)}
	if e, ok := firstErr.Load().(string); ok {
		p.FirstError = e
	}
	if len(cfg.CPUOf) > 0 {
		p.CPUCores = cpu.cores()
	}
	fmt.Fprintf(cfg.Progress, "\r  %-22s %3d clients  %6d done  %8.1f/s  p50 %7.2f ms  p99 %7.2f ms  errors %d\033[K\n",
		scenario, clients, p.Requests, p.PerSecond, p.P50Millis, p.P99Millis, p.Errors)
	return p
}

func progress(w io.Writer, scenario string, clients int, start time.Time, done *atomic.Int64, stop chan struct{}) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			s := time.Since(start).Seconds()
			fmt.Fprintf(w, "\r  %-22s %3d clients  %6d done  %8.1f/s  %5.1fs\033[K", scenario, clients, done.Load(), float64(done.Load())/s, s)
		}
	}
}

func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i].Microseconds()) / 1000
}

// pick returns a random pair of distinct indexes below n.
func pick(rng *rand.Rand, n int) (int, int) {
	a, b := rng.IntN(n), rng.IntN(n-1)
	if b >= a {
		b++
	}
	return a, b
}
