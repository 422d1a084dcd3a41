// Package chaos is the seeded chaos run (`payments chaos`, docs/reliability.md): the production
// topology of `make run-cluster` on a PostgreSQL of its own, well-behaved clients sending a
// seeded mix of transfers, refunds, payouts, authorizations with their captures and voids, and duplicates, a seeded schedule of faults (processes
// killed and paused, PostgreSQL cut off and crashed, Temporal services killed, the bank down or
// slow), and, once the faults stop and the system drains, a checker that knows what must be
// true: every final answer is what the ledger holds, one key has one answer, nothing moved twice,
// the bank paid each payout once, every event is a committed change, nothing is left pending.
//
// The seed fixes the operations (kinds, keys, amounts, duplicates) and the faults (kinds,
// targets, durations, pauses); the interleaving of the processes is the machine's.
package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/payments/payments/internal/ledger"
)

// Options of a run.
type Options struct {
	Seed    uint64
	Ops     int // operations to send
	Clients int // clients sending at once; default 8
	Bin     string
	Root    string    // the repository (bin/temporal-server, deploy/temporal)
	Out     io.Writer // progress and the report
	Keep    bool      // keep the run's directory (logs, PostgreSQL's data) afterwards
}

// idempotencyTTL is the processes' PAYMENTS_IDEMPOTENCY_TTL (the default), for reconcile.
const idempotencyTTL = 24 * time.Hour

// drainBound is how long, after the faults stop, everything must take to settle: the last
// clients' answers, the payouts' banks and return windows, the runs.
const drainBound = 3 * time.Minute

// deliveryBound is how long, after the drain, the checker waits for the webhook backlogs the
// faults left: an endpoint whose backlog has not shrunk for two minutes is stuck (more than seven
// refusals of one event in a row by the flaky receiver, about one in a million, or a fault of the
// processor's), and one still shrinking after 30 minutes has not caught up. Past a delivery
// activity's heartbeat timeout and backoffs, how soon it catches up is a figure the report gives
// (ADR 0018).
var deliveryBound = deliveryBounds{Stall: 2 * time.Minute, Cap: 30 * time.Minute}

// Report is what a run did and found.
type Report struct {
	Seed        uint64
	Ops         map[string]int // by kind and variant ("transfer", "refund again", …)
	Faults      map[string]int // by kind
	Attempts    int            // requests sent, retries included
	Lost        int            // requests that got no answer (killed, paused or cut off mid-way)
	LostCommits int            // operations that committed while one of their attempts was under way and lost its answer
	Restarts    int            // processes started again after they exited by themselves (a start during a fault)
	Webhooks    Webhooks
	Violations  []string
	Took        time.Duration
}

// Webhooks is what the owners' receiver got.
type Webhooks struct {
	Endpoints  int
	Deliveries int            // received, signature verified, repeats included
	Repeats    int            // deliveries of an event the endpoint had received before
	Fates      map[string]int // how the receiver took them: "2xx", "500", "slow", "dropped"
	Waited     time.Duration  // after the drain, until every event had reached its endpoints
}

// Run runs one seeded chaos run and reports it. The error is the run failing to start or
// finish; what it found broken is in Report.Violations.
func Run(ctx context.Context, o Options) (Report, error) {
	start := time.Now()
	if o.Clients == 0 {
		o.Clients = 8
	}
	r := Report{Seed: o.Seed, Ops: map[string]int{}, Faults: map[string]int{}}
	dir, err := os.MkdirTemp("", fmt.Sprintf("payments-chaos-%d-", o.Seed))
	if err != nil {
		return r, err
	}
	keep := o.Keep
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil { // PostgreSQL may run as another user (root cannot)
		return r, err
	}
	sys, err := startSystem(ctx, dir, o.Bin, o.Root, o.Out)
	if err != nil {
		return r, fmt.Errorf("starting the system (logs in %s): %w", dir, err)
	}
	defer sys.stop()
	recv, err := startReceiver(o.Seed, true)
	if err != nil {
		return r, err
	}
	defer recv.close()

	w := &workload{seed: o.Seed, apis: sys.apis(), client: &http.Client{Timeout: 3 * time.Second}, recv: recv}
	if err := w.setUp(ctx, &ledger.Ledger{DB: sys.db}); err != nil {
		return r, err
	}
	step(o.Out, "Seed %d: %d operations from %d clients, faults all along (logs in %s)", o.Seed, o.Ops, o.Clients, dir)
	faultCtx, stopFaults := context.WithCancel(ctx)
	in := newInjector(sys, o.Seed)
	faultsDone := make(chan struct{})
	go func() { in.run(faultCtx); close(faultsDone) }()

	w.runAll(ctx, o.Ops, o.Clients, o.Out)
	stopFaults()
	<-faultsDone
	step(o.Out, "Faults stopped; draining (at most %s)", drainBound)
	if err := sys.heal(ctx); err != nil {
		return r, err
	}
	if err := w.drain(ctx, sys); err != nil {
		step(o.Out, "Not drained: %v", err)
	}

	step(o.Out, "Checking every answer against the ledger, the bank and Temporal")
	c := newChecker(sys)
	byN := map[int]*op{}
	for _, op := range w.ops {
		byN[op.N] = op
	}
	for _, op := range w.ops {
		c.op(ctx, op, byN)
	}
	for _, e := range w.hooks {
		c.op(ctx, e.Op, byN)
		c.endpoint(ctx, w, e)
	}
	c.ledger(ctx)
	feeds := c.feed(ctx, w, sys.apis()[0])
	step(o.Out, "Waiting for every event to reach its webhook endpoints (each endpoint's backlog must shrink at least every %s; at most %s)",
		deliveryBound.Stall, deliveryBound.Cap)
	r.Webhooks = w.webhookReport(c.webhooks(ctx, w, feeds, deliveryBound))
	r.LostCommits = c.lostCommits(ctx, w)

	log := in.faults()
	for _, f := range log {
		r.Faults[f.Kind]++
	}
	sys.mu.Lock()
	r.Restarts = sys.restarts // the supervisor still runs
	sys.mu.Unlock()
	for _, op := range w.ops {
		r.Ops[strings.TrimSpace(op.Kind+" "+op.Variant)]++
		r.Attempts += op.Attempts
		r.Lost += op.LostAnswers
	}
	schedule := filepath.Join(dir, "faults.log")
	writeSchedule(schedule, log)
	for _, v := range c.found {
		r.Violations = append(r.Violations, describe(o.Seed, v, log, schedule))
	}
	if len(r.Violations) > 0 {
		keep = true // the logs, the data and the schedule, to look at
	}
	r.Took = time.Since(start)
	return r, nil
}

// runAll sends operations 0 … n-1 from clients at once, saying how far it is now and then.
func (w *workload) runAll(ctx context.Context, n, clients int, out io.Writer) {
	start := time.Now()
	w.plan(n)
	var next atomic.Int64
	var done atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				w.run(ctx, w.ops[i]) // after ctx ends, this closes its done at once
				if d := done.Add(1); d%500 == 0 {
					step(out, "%d of %d operations answered (%s)", d, n, time.Since(start).Round(time.Second))
				}
			}
		})
	}
	wg.Wait()
}

// heal undoes whatever a fault left behind: every process running and resumed, PostgreSQL
// reachable, the bank answering at its usual pace, the APIs ready.
func (s *system) heal(ctx context.Context) error {
	s.dbProxy.Restore()
	for _, name := range []string{"api-1", "api-2", "worker-1", "worker-2"} {
		s.signal(name, syscall.SIGCONT) // a paused process was resumed already: this is a safeguard
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !s.restartExited() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("processes keep exiting after the faults stopped (logs in %s)", s.dir)
		}
		time.Sleep(2 * time.Second)
	}
	for _, api := range s.apis() {
		if err := waitReady(ctx, api+"/readyz", 2*time.Minute); err != nil {
			return err
		}
	}
	return s.bankFaults(`{"latency":"10ms","down_for":"0s"}`)
}

// drain waits until nothing is pending: no transfer or refund pending, no payout processing, no
// authorization held, no scheduled transfer active, no operation's workflow running.
func (w *workload) drain(ctx context.Context, s *system) error {
	deadline := time.Now().Add(drainBound)
	for {
		var pending int
		err := s.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM transfers WHERE status = 'pending')
			+ (SELECT count(*) FROM payouts WHERE status = 'processing')
			+ (SELECT count(*) FROM authorizations WHERE status IN ('pending', 'authorized'))
			+ (SELECT count(*) FROM scheduled_transfers WHERE status IN ('pending', 'active'))`).Scan(&pending)
		running, rerr := runningWorkflows(ctx, s)
		if err == nil && rerr == nil && pending == 0 && running == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d pending in the ledger, %d runs open (%v %v)", pending, running, err, rerr)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// describe says what broke, with what it takes to see it again: the seed, the operation, and
// the faults around it (for the ledger as a whole, the schedule's file).
func describe(seed uint64, v violation, log []fault, schedule string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s", seed, v.What)
	if v.Op == nil {
		fmt.Fprintf(&b, "\n    the whole fault schedule: %s", schedule)
	}
	if v.Op != nil {
		o := v.Op
		fmt.Fprintf(&b, "\n    operation %d: %s (key %s, owner %d) POST %s %s; %d attempts, %d without an answer, %s to %s",
			o.N, strings.TrimSpace(o.Kind+" "+o.Variant), o.Key, o.Owner, o.Path, o.Body, o.Attempts, o.LostAnswers,
			o.Start.Format("15:04:05.000"), o.End.Format("15:04:05.000"))
		for _, a := range o.Answers {
			fmt.Fprintf(&b, "\n    answered %s", a)
		}
		for _, f := range around(log, o.Start, o.End, 5*time.Second) {
			fmt.Fprintf(&b, "\n    fault %s", f)
		}
	}
	return b.String()
}

// Print writes the report for a person to read.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "Seed %d, %s\n", r.Seed, r.Took.Round(time.Second))
	total := 0
	for _, n := range r.Ops {
		total += n
	}
	fmt.Fprintf(w, "  operations  %d: %s\n", total, counts(r.Ops))
	faults := 0
	for _, n := range r.Faults {
		faults += n
	}
	fmt.Fprintf(w, "  faults      %d: %s\n", faults, counts(r.Faults))
	fmt.Fprintf(w, "  requests    %d (%d retries), %d without an answer; %d operations committed while an attempt that lost its answer was under way\n",
		r.Attempts, r.Attempts-total, r.Lost, r.LostCommits)
	h := r.Webhooks
	fmt.Fprintf(w, "  webhooks    %d deliveries to %d endpoints (%d repeats), taken %s; all in %s after the drain\n",
		h.Deliveries, h.Endpoints, h.Repeats, counts(h.Fates), h.Waited.Round(time.Second))
	fmt.Fprintf(w, "  restarts    %d processes started again after exiting on their own (a start during a fault)\n", r.Restarts)
	fmt.Fprintf(w, "  violations  %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}

// webhookReport counts what the receiver got.
func (w *workload) webhookReport(waited time.Duration) Webhooks {
	h := Webhooks{Endpoints: len(w.hooks), Waited: waited}
	for _, e := range w.hooks {
		seen := map[string]bool{}
		for _, r := range w.recv.received(e.Path) {
			h.Deliveries++
			if seen[r.ID] {
				h.Repeats++
			}
			seen[r.ID] = true
		}
	}
	h.Fates = w.recv.taken()
	return h
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// writeSchedule writes the fault log to path, one fault a line, in the order they started.
func writeSchedule(path string, log []fault) {
	var b strings.Builder
	for _, f := range log {
		fmt.Fprintln(&b, f)
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}
