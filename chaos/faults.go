package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kinds of fault.
const (
	faultKillAPI         = "kill-api"         // SIGKILL an API process, start it again
	faultKillWorker      = "kill-worker"      // SIGKILL a worker process, start it again
	faultPauseAPI        = "pause-api"        // SIGSTOP an API past the clients' timeouts, then SIGCONT
	faultPauseWorker     = "pause-worker"     // SIGSTOP a worker past its activities' and tasks' timeouts
	faultCutDatabase     = "cut-database"     // drop every payments connection to PostgreSQL, refuse new ones
	faultRestartPostgres = "restart-postgres" // crash PostgreSQL itself (immediate shutdown) and start it
	faultKillTemporal    = "kill-temporal"    // SIGKILL a Temporal service (history, matching, frontend, worker), start it
	faultBankDown        = "bank-down"        // the bank answers 503 to everything
	faultBankSlow        = "bank-slow"        // the bank answers after 3 s
	// faultLoseCommits freezes every payments connection to PostgreSQL, so that the
	// transactions whose COMMIT was on its way commit with their answer held, then kills a
	// worker and an API and drops the held connections: postings committed, and nobody told.
	faultLoseCommits = "lose-commits"
)

// faultWeights is how often each kind is drawn.
var faultWeights = []struct {
	kind   string
	weight int
}{
	{faultKillAPI, 16}, {faultKillWorker, 16}, {faultPauseAPI, 5}, {faultPauseWorker, 8}, {faultCutDatabase, 14},
	{faultRestartPostgres, 5}, {faultKillTemporal, 10}, {faultBankDown, 8}, {faultBankSlow, 5}, {faultLoseCommits, 10},
}

// fault is one fault as it was injected.
type fault struct {
	Kind, Target string
	For          time.Duration
	Start, End   time.Time
	Err          string // what went wrong injecting or healing it, if anything
}

func (f fault) String() string {
	s := fmt.Sprintf("%s %s %s for %s", f.Start.Format("15:04:05.000"), f.Kind, f.Target, f.For.Round(time.Millisecond))
	if f.Err != "" {
		s += " (" + f.Err + ")"
	}
	return s
}

// injector draws faults from the seed, a new one every few hundred milliseconds, each healed
// after its duration; faults on different parts overlap, and a part already faulted is left
// alone until healed (the draw is skipped).
type injector struct {
	sys *system
	rng *rand.Rand

	mu   sync.Mutex
	log  []fault
	busy map[string]bool // parts faulted now
	wg   sync.WaitGroup
}

func newInjector(sys *system, seed uint64) *injector {
	return &injector{sys: sys, rng: rand.New(rand.NewPCG(seed, 0xfa017)), busy: map[string]bool{}}
}

// run injects faults until ctx ends, then waits for the ones under way to heal.
func (in *injector) run(ctx context.Context) {
	defer in.wg.Wait()
	for {
		gap := time.Duration(200+in.rng.IntN(800)) * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		f := in.draw()
		parts := f.parts()
		in.mu.Lock()
		free := true
		for _, p := range parts {
			free = free && !in.busy[p]
		}
		if free {
			for _, p := range parts {
				in.busy[p] = true
			}
		}
		in.mu.Unlock()
		if !free {
			continue
		}
		in.wg.Go(func() {
			f.Start = time.Now()
			if err := in.inject(ctx, &f); err != nil {
				f.Err = err.Error()
			}
			f.End = time.Now()
			if f.Kind == faultBankDown { // the bank heals itself
				f.End = f.Start.Add(f.For)
			}
			in.mu.Lock()
			in.log = append(in.log, f)
			for _, p := range parts {
				delete(in.busy, p)
			}
			in.mu.Unlock()
		})
	}
}

// parts are what f acts on: the processes, PostgreSQL (its proxy and itself), the bank.
func (f fault) parts() []string {
	switch f.Kind {
	case faultCutDatabase, faultRestartPostgres:
		return []string{"postgresql"}
	case faultLoseCommits:
		worker, api, _ := strings.Cut(f.Target, "+")
		return []string{"postgresql", worker, api}
	default:
		return []string{f.Target}
	}
}

func (in *injector) draw() fault {
	total := 0
	for _, w := range faultWeights {
		total += w.weight
	}
	n := in.rng.IntN(total)
	kind := ""
	for _, w := range faultWeights {
		if n < w.weight {
			kind = w.kind
			break
		}
		n -= w.weight
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(in.rng.Int64N(int64(hi-lo))) }
	one := func(names ...string) string { return names[in.rng.IntN(len(names))] }
	switch kind {
	case faultKillAPI:
		return fault{Kind: kind, Target: one("api-1", "api-2"), For: between(200*time.Millisecond, 2*time.Second)}
	case faultKillWorker:
		return fault{Kind: kind, Target: one("worker-1", "worker-2"), For: between(200*time.Millisecond, 2*time.Second)}
	case faultPauseAPI:
		return fault{Kind: kind, Target: one("api-1", "api-2"), For: between(3*time.Second, 6*time.Second)}
	case faultPauseWorker:
		// Past a transfer's posting (10 s), a workflow task (10 s) and a payout's bank call (30 s).
		return fault{Kind: kind, Target: one("worker-1", "worker-2"), For: between(10*time.Second, 35*time.Second)}
	case faultCutDatabase:
		return fault{Kind: kind, Target: "postgresql", For: between(500*time.Millisecond, 4*time.Second)}
	case faultRestartPostgres:
		return fault{Kind: kind, Target: "postgresql", For: between(0, time.Second)}
	case faultKillTemporal:
		return fault{Kind: kind, Target: one("history", "matching", "frontend", "worker"), For: between(200*time.Millisecond, 2*time.Second)}
	case faultBankDown:
		return fault{Kind: kind, Target: "bank", For: between(2*time.Second, 8*time.Second)}
	case faultLoseCommits:
		return fault{Kind: kind, Target: one("worker-1", "worker-2") + "+" + one("api-1", "api-2"), For: between(100*time.Millisecond, time.Second)}
	default:
		return fault{Kind: kind, Target: "bank", For: between(2*time.Second, 6*time.Second)}
	}
}

// inject does f and heals it after f.For.
func (in *injector) inject(ctx context.Context, f *fault) error {
	s := in.sys
	wait := func() { time.Sleep(f.For) }
	switch f.Kind {
	case faultKillAPI, faultKillWorker:
		s.kill(f.Target)
		wait()
		return s.start(f.Target)
	case faultPauseAPI, faultPauseWorker:
		s.signal(f.Target, syscall.SIGSTOP)
		wait()
		s.signal(f.Target, syscall.SIGCONT)
	case faultCutDatabase:
		s.dbProxy.Cut()
		wait()
		s.dbProxy.Restore()
	case faultRestartPostgres:
		if err := s.pg.Crash(); err != nil {
			return err
		}
		wait()
		return s.pg.start(ctx)
	case faultKillTemporal:
		if err := s.temporal.KillService(f.Target); err != nil {
			return err
		}
		wait()
		return s.temporal.StartService(f.Target)
	case faultBankDown:
		return s.bankFaults(fmt.Sprintf(`{"down_for":%q}`, f.For.String()))
	case faultLoseCommits:
		worker, api, _ := strings.Cut(f.Target, "+")
		s.dbProxy.FreezeReplies() // what is sent still arrives: COMMITs commit, unanswered
		wait()
		s.kill(worker)
		s.kill(api)
		s.dbProxy.Cut()
		s.dbProxy.Restore()
		if err := s.start(worker); err != nil {
			return err
		}
		return s.start(api)
	case faultBankSlow:
		if err := s.bankFaults(`{"latency":"3s"}`); err != nil {
			return err
		}
		wait()
		return s.bankFaults(`{"latency":"10ms"}`)
	}
	return nil
}

// bankFaults changes the bank simulator's knobs (docs/bank.md, admin).
func (s *system) bankFaults(knobs string) error {
	resp, err := http.Post(s.bankURL+"/admin/faults", "application/json", bytes.NewReader([]byte(knobs)))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bank faults %s: %d", knobs, resp.StatusCode)
	}
	return nil
}

// faults is the log so far, in the order the faults started.
func (in *injector) faults() []fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	log := append([]fault(nil), in.log...)
	slices.SortFunc(log, func(a, b fault) int { return a.Start.Compare(b.Start) })
	return log
}

// around is the faults that overlap [from-margin, to+margin].
func around(log []fault, from, to time.Time, margin time.Duration) []fault {
	var out []fault
	for _, f := range log {
		if f.End.After(from.Add(-margin)) && f.Start.Before(to.Add(margin)) {
			out = append(out, f)
		}
	}
	return out
}
