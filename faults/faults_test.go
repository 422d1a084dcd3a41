// Package faults holds the slow tests that break things on purpose: a worker killed between its
// ledger commit and telling Temporal, PostgreSQL cut off under load, the Temporal server
// restarted mid-flight. Each ends with the ledger reconciled and every transfer posted once.
// `make test-faults` runs them alone; `make test` runs them too.
package faults

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/testenv"
	"github.com/payments/payments/worker"
)

// pairs opens n pairs of accounts for a new owner and funds each source with amount.
func pairs(t *testing.T, env *testenv.Env, n int, amount int64) (key string, from, to []string) {
	_, key = env.Owner(t)
	for range n {
		f := env.Account(t, key, "USD")
		env.Fund(t, f, amount)
		from, to = append(from, f), append(to, env.Account(t, key, "USD"))
	}
	return key, from, to
}

// completeOnce retries each transfer with its key until it answers 201, then checks that each
// moved its money once.
func completeOnce(t *testing.T, env *testenv.Env, key, prefix string, from, to []string, amount, funded int64) {
	t.Helper()
	for i := range from {
		k := fmt.Sprintf("%s-%d", prefix, i)
		var r testenv.Response
		testenv.WaitFor(t, "transfer "+k+" to complete", func() bool {
			r = env.Do(t, "POST", "/v1/transfers", key, k, testenv.TransferBody(from[i], to[i], amount))
			return r.Status == http.StatusCreated
		})
		if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1`, r.JSON(t)["id"]); n != 2 {
			t.Errorf("%s: %d entries, want 2", k, n)
		}
		if env.Balance(t, from[i]) != funded-amount || env.Balance(t, to[i]) != amount {
			t.Errorf("%s: balances %d/%d, want %d/%d", k, env.Balance(t, from[i]), env.Balance(t, to[i]), funded-amount, amount)
		}
	}
	env.Reconcile(t)
}

// sendHeld sends one transfer per pair while every source is held, and returns once all of them
// are posting (waiting for their locks), with a function that releases them and waits for the
// answers.
func sendHeld(t *testing.T, env *testenv.Env, key, prefix string, from, to []string, amount int64) (release func()) {
	var releases []func()
	for _, f := range from {
		releases = append(releases, env.Hold(t, f))
	}
	var wg sync.WaitGroup
	for i := range from {
		wg.Go(func() {
			env.Do(t, "POST", "/v1/transfers", key, fmt.Sprintf("%s-%d", prefix, i), testenv.TransferBody(from[i], to[i], amount))
		})
	}
	testenv.WaitFor(t, "every transfer to be posting", func() bool { return env.Waiting(t) >= len(from) })
	return func() {
		for _, r := range releases {
			r()
		}
		wg.Wait()
	}
}

// The worker dies after the ledger transaction committed and before Temporal heard of it: a
// new worker runs the posting again, which finds it done and posts nothing. 20 transfers die
// at that point together.
func TestWorkerKilledBetweenCommitAndRecord(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_worker", testenv.Options{NoWorker: true})
	toTemporal := testenv.NewProxy(t, env.Dev.FrontendHostPort())
	// Enough connections for all 20 postings to wait on their locks at once.
	first := env.Process(t, testenv.BuildPayments(t), toTemporal.Addr(), []string{"worker"},
		"DATABASE_URL="+env.URL+"&pool_max_conns=32")
	const n, amount, funded = 20, 60, 100
	key, from, to := pairs(t, env, n, funded)

	release := sendHeld(t, env, key, "crash", from, to, amount)
	toTemporal.Freeze() // from here the worker's reports to Temporal go nowhere
	answered := make(chan struct{})
	go func() { release(); close(answered) }()
	testenv.WaitFor(t, "every posting to commit", func() bool {
		return env.Count(t, `SELECT count(*) FROM transfers WHERE from_account_id = ANY($1) AND status = 'completed'
			AND workflow_id LIKE 'transfer/%'`, from) == n
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	toTemporal.Cut()

	second := worker.New(env.Temporal, &activities.Activities{Ledger: env.Ledger})
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	completeOnce(t, env, key, "crash", from, to, amount, funded)
	<-answered
}

// PostgreSQL is cut off, through a proxy, in the middle of a load: requests fail with 503 and
// postings retry; once it is back, every transfer completes once.
func TestPostgresUnreachableDuringLoad(t *testing.T) {
	toPostgres := testenv.NewProxy(t, testenv.PostgresAddr())
	env := testenv.New(t, "payments_test_faults_pg", testenv.Options{DatabaseHost: toPostgres.Addr()})
	const accounts, funded, count, clients = 10, 10_000, 400, 16
	_, key := env.Owner(t)
	ids := env.FundedAccounts(t, key, accounts, funded)
	want := map[string]int64{}
	for _, id := range ids {
		want[id] = funded
	}
	rng := rand.New(rand.NewPCG(3, 4))
	type transfer struct {
		from, to string
		amount   int64
	}
	ts := make([]transfer, count)
	for i := range ts {
		f, g := testenv.Pair(rng, accounts)
		ts[i] = transfer{ids[f], ids[g], 1 + rng.Int64N(50)}
	}

	var done, failures atomic.Int32
	answers := make([]testenv.Response, count)
	next := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range next {
				for { // a client that retries with the same key until it has a final answer
					r := env.Do(t, "POST", "/v1/transfers", key, fmt.Sprintf("pg-%d", i), testenv.TransferBody(ts[i].from, ts[i].to, ts[i].amount))
					if r.Status == http.StatusCreated || r.Status == http.StatusUnprocessableEntity {
						answers[i] = r
						break
					}
					failures.Add(1)
				}
				done.Add(1)
			}
		})
	}
	go func() {
		for i := range ts {
			next <- i
		}
		close(next)
	}()
	testenv.WaitFor(t, "a quarter of the load to be answered", func() bool { return done.Load() >= count/4 })
	toPostgres.Cut()
	testenv.WaitFor(t, "clients to feel the outage", func() bool { return failures.Load() >= 50 })
	toPostgres.Restore()
	wg.Wait()

	for i, a := range answers {
		if a.Status == http.StatusCreated {
			want[ts[i].from] -= ts[i].amount
			want[ts[i].to] += ts[i].amount
		}
	}
	for _, id := range ids {
		if got := env.Balance(t, id); got != want[id] {
			t.Errorf("account %s: balance %d, the answers add up to %d", id, got, want[id])
		}
	}
	t.Logf("%d transfers, %d answers that were not final (503, 202, 409) during the outage", count, failures.Load())
	env.Reconcile(t)
}

// The Temporal server stops and starts again (its state in a SQLite file) while transfers are
// in flight: they complete once, and their retries get the result.
func TestTemporalRestartsMidFlight(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_temporal", testenv.Options{
		TemporalState: filepath.Join(t.TempDir(), "temporal.db")})
	const n, amount, funded = 10, 30, 100
	key, from, to := pairs(t, env, n, funded)

	release := sendHeld(t, env, key, "restart", from, to, amount)
	env.RestartTemporal(t)
	release()
	completeOnce(t, env, key, "restart", from, to, amount, funded)
	for i := range from {
		if runs := env.Executions(t, fmt.Sprintf("transfer/%s/restart-%d", ownerOf(t, env, from[i]), i)); len(runs) != 1 {
			t.Errorf("transfer %d: %d runs, want 1", i, len(runs))
		}
	}
}

func ownerOf(t *testing.T, env *testenv.Env, account string) string {
	var owner string
	if err := env.DB.QueryRow(t.Context(), `SELECT owner_id FROM accounts WHERE id = $1`, account).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	return owner
}
