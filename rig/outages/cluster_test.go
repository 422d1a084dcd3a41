package outages

// The production topology under faults: a Temporal cluster (four service processes on
// PostgreSQL, rig/cluster) with two `payments api` and two `payments worker` processes
// apart, whatever PAYMENTS_TEST_TEMPORAL says. Each test holds transfers mid-posting (every
// request sent to both APIs at once, as a client retrying elsewhere would), breaks a service of
// the cluster, sends more transfers while it is broken, mends it, and ends as the others do:
// every transfer answered as the contract says, posted once, under one run, the ledger
// reconciled. `make test` runs them (TestCluster*); so does `make test-cluster`.

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payments/payments/rig/cluster"
	"github.com/payments/payments/rig/testenv"
)

// split is a cluster Env with two API processes (bases) and two worker processes.
type split struct {
	env   *testenv.Env
	bases []string
}

func newSplit(t *testing.T, name string) split {
	env := testenv.New(t, name, testenv.Options{Cluster: true, NoWorker: true})
	bin := testenv.BuildPayments(t)
	for range 2 {
		// Connections enough for every held posting to wait on its lock.
		env.Process(t, bin, "", []string{"worker"}, "DATABASE_URL="+env.URL+"&pool_max_conns=12")
	}
	s := split{env: env}
	for range 2 {
		_, base := env.StartAPI(t, bin, "")
		s.bases = append(s.bases, base)
	}
	return s
}

// sendOnce sends tr once to each API at the same time, recording both answers.
func (s split) sendOnce(t *testing.T, a *answers, apiKey string, tr planned) {
	var wg sync.WaitGroup
	for _, base := range s.bases {
		wg.Go(func() { a.add(t, tr, testenv.DoAt(t, base, "POST", "/v1/transfers", apiKey, tr.key, tr.body())) })
	}
	wg.Wait()
}

// sendAll sends every transfer, to both APIs at once, until each has its final answers.
func (s split) sendAll(t *testing.T, a *answers, apiKey string, ts []planned) {
	deadline := time.Now().Add(2 * time.Minute)
	var wg sync.WaitGroup
	for i, tr := range ts {
		for j, base := range s.bases {
			wg.Go(func() {
				for !a.add(t, tr, testenv.DoAt(t, base, "POST", "/v1/transfers", apiKey, tr.key, tr.body())) {
					if time.Now().After(deadline) {
						t.Errorf("%s: no final answer from API %d by the deadline", tr.key, j)
						return
					}
					time.Sleep(time.Duration(50+10*((i+j)%5)) * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
}

// sendHeld sends each transfer once to both APIs while every source is held, and returns once
// all of them are posting, with a function that releases them and waits for their answers.
func (s split) sendHeld(t *testing.T, a *answers, apiKey string, ts []planned) (release func()) {
	var releases []func()
	for _, tr := range ts {
		releases = append(releases, s.env.Hold(t, tr.from))
	}
	var wg sync.WaitGroup
	for _, tr := range ts {
		wg.Go(func() { s.sendOnce(t, a, apiKey, tr) })
	}
	release = func() {
		for _, r := range releases {
			r()
		}
		wg.Wait()
	}
	t.Cleanup(release)
	testenv.WaitFor(t, "every transfer to be posting", func() bool { return s.env.Waiting(t) >= len(ts) })
	return release
}

// underFault runs the scenario around fault, which breaks the cluster and returns a function
// that mends it: 10 transfers held mid-posting through the fault, 10 more sent while it lasts.
func underFault(t *testing.T, name string, fault func(t *testing.T, c *cluster.Cluster) (mend func())) {
	s := newSplit(t, name)
	ownerID, apiKey, ts, funding := pairs(t, s.env, "c", 20, 30, 100)
	held, during := ts[:10], ts[10:]
	ids, _ := keysOf(ownerID, held)
	a := newAnswers("held")

	release := s.sendHeld(t, a, apiKey, held)
	before := running(t, s.env, ids, "before the fault")
	pids := s.env.TemporalPids()
	mend := fault(t, s.env.Cluster)

	a.setPhase("broken")
	var wg sync.WaitGroup
	for _, tr := range during { // one try each, at both APIs; the retries come after
		wg.Go(func() { s.sendOnce(t, a, apiKey, tr) })
	}
	time.Sleep(2 * time.Second) // the fault lasts while those wait
	mend()
	if now := s.env.TemporalPids(); slices.Equal(now, pids) {
		t.Fatalf("the cluster's processes %v are those from before the fault: it did not happen", now)
	}
	wg.Wait()
	if after := running(t, s.env, ids, "after the fault"); !slices.Equal(before, after) {
		t.Fatalf("runs before the fault %v, after %v", before, after)
	}

	a.setPhase("released")
	release()
	a.setPhase("retry")
	s.sendAll(t, a, apiKey, ts)
	a.settle(t, s.env, ownerID, ts, funding)
	t.Logf("answers: %s", a.summary())
}

// restart starts service again, failing t if it cannot.
func restart(t *testing.T, c *cluster.Cluster, service string) {
	t.Helper()
	if err := c.StartService(service); err != nil {
		t.Fatal(err)
	}
}

// The history service (the shards: every workflow's state) is killed, SIGKILL, while postings
// are held and more transfers arrive, and started again: its shards are acquired anew.
func TestClusterHistoryKilledMidFlight(t *testing.T) {
	underFault(t, "payments_test_faults_c_history", func(t *testing.T, c *cluster.Cluster) func() {
		if err := c.KillService("history"); err != nil {
			t.Fatal(err)
		}
		return func() { restart(t, c, "history") }
	})
}

// The matching service (the task queues) is killed, SIGKILL: tasks are not dispatched until it
// is back, and none is lost.
func TestClusterMatchingKilledMidFlight(t *testing.T) {
	underFault(t, "payments_test_faults_c_matching", func(t *testing.T, c *cluster.Cluster) func() {
		if err := c.KillService("matching"); err != nil {
			t.Fatal(err)
		}
		return func() { restart(t, c, "matching") }
	})
}

// The frontend (every client's door: the APIs' and the workers') is restarted, as an operator
// would (interrupt, wait, start): the clients reconnect by themselves.
func TestClusterFrontendRestarted(t *testing.T) {
	underFault(t, "payments_test_faults_c_frontend", func(t *testing.T, c *cluster.Cluster) func() {
		if err := c.StopService("frontend"); err != nil {
			t.Fatal(fmt.Errorf("stopping the frontend: %w", err))
		}
		return func() { restart(t, c, "frontend") }
	})
}
