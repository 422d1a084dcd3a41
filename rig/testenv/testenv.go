// Package testenv gives integration tests the real parts: a database of their own on the local
// PostgreSQL, a tuned Temporal dev server from ./bin/temporal, a worker, and the HTTP API,
// assembled as the payments command assembles them (app). By concern: testenv.go (the
// environment), database.go, http.go (requests and the resources they make), ledger.go (reading
// and holding the ledger, reconciling it, TestMain), answers.go (what the tests hold the API's
// answers to), temporal.go (runs, Schedules), histories.go (recording the committed histories),
// process.go (payments processes a test can kill), proxy.go (connections a test can break),
// leftovers.go.
package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/api"
	"github.com/payments/payments/app"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/rig/cluster"
	"github.com/payments/payments/rig/devserver"
	"github.com/payments/payments/schedules"
	"github.com/payments/payments/transfers"
	"github.com/payments/payments/worker"
)

// Env is one running system: database, Temporal, a worker and the HTTP API on one client, so
// that transfers start eagerly as under `payments serve`.
type Env struct {
	URL       string // the test database
	DB        *pgxpool.Pool
	Ledger    *ledger.Ledger
	Temporal  client.Client
	Transfers *transfers.Service
	Schedules *schedules.Service
	Server    *httptest.Server
	Dev       *devserver.Server // nil on a cluster
	Cluster   *cluster.Cluster  // nil on the dev server (Clustered)
	Worker    sdkworker.Worker  // nil with Options.NoWorker
	Bank      *Bank             // nil without Options.Bank
	minTTL    *time.Duration    // the shortest idempotency TTL any of the Env's APIs used

	devOptions devserver.Options
	clusterDBs [2]string           // the cluster's persistence and visibility databases
	database   string              // the test database's name, dropped by Close
	stateDir   string              // the dev server's state, removed by Close
	apiLog     *slog.Logger        // the APIs' warnings, if kept (PAYMENTS_TEST_LOGS)
	logs       []*os.File          // kept logs, closed by Close
	listener   *operation.Listener // shared by the worker and the APIs on the Env's own client
	bankURL    string              // where the Env's bank listens, or will
}

// Options change an Env from its defaults.
type Options struct {
	SyncWait time.Duration // default 10s
	TTL      time.Duration // default 24h
	RetryFor time.Duration // default 2m
	DB       *pgxpool.Pool // the API's database, default the Env's
	Temporal client.Client // the API's Temporal client, default the Env's (with eager start)
	// Split serves the API as `payments api` does, without the worker in its process: no
	// eager start, the answer through the server (Update-With-Start).
	Split bool

	// How patient payouts are with the bank: defaults 2s, 200ms, 5s (milliseconds settle it).
	BankRetryFor, BankPollAfter, ReturnWindow time.Duration
	// Which payouts this API holds for approval, and how long (default: none, 72h).
	ApprovalThreshold int64
	ApprovalTimeout   time.Duration
	// How webhooks are delivered: RetryFor (default 72h) goes with the delivery runs this API
	// starts, Timeout (default 2s) is the worker's; tests' receivers are on loopback, so the
	// URL policy is insecure unless WebhookSecure, and allows loopback targets only, always.
	WebhookRetryFor, WebhookTimeout time.Duration
	WebhookSecure                   bool

	// For Start only.
	DatabaseHost  string // host:port the Env reaches PostgreSQL through (a Proxy); default direct
	NoWorker      bool   // run no worker here: the test runs its own (no eager start then)
	TemporalState string // the dev server's SQLite file, so that RestartTemporal keeps its state
	Cluster       bool   // run on a Temporal cluster of the Env's own, whatever Clustered says
	Bank          bool   // run a bank simulator for the Env (Env.Bank)
}

// Start brings up an Env on a fresh database for name (see FreshDatabase). Call it from TestMain
// and Close it after m.Run. If Start fails, it stops what it had started. Whatever happens to
// this process, its dev server dies with it (see supervise.Start), and a later Start drops
// its database and the dev server's state.
func Start(ctx context.Context, name string, o Options) (_ *Env, err error) {
	url, err := FreshDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	e := &Env{URL: url, minTTL: new(time.Duration), devOptions: devserver.Options{
		Binary: filepath.Join(RepoRoot(), "bin", "temporal"), DBFile: o.TemporalState, Keys: Keys}}
	e.database, _ = databaseName(name)
	defer func() {
		if err != nil {
			e.Close()
			if e.Temporal != nil {
				e.Temporal.Close()
			}
		}
	}()
	if e.devOptions.Log, err = e.keptLog(name + "-temporal"); err != nil {
		return nil, err
	}
	apiLog, err := e.keptLog(name + "-api")
	if err != nil {
		return nil, err
	}
	e.apiLog = slog.New(slog.NewTextHandler(apiLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := e.startTemporal(ctx, name, o); err != nil {
		return nil, err
	}
	if o.DatabaseHost != "" {
		url = strings.Replace(url, PostgresAddr(), o.DatabaseHost, 1)
	}
	if e.DB, err = database.Open(ctx, url); err != nil {
		return nil, err
	}
	e.Ledger = &ledger.Ledger{DB: e.DB, Keys: Keys}
	e.bankURL = "http://" + FreeAddr()
	if !o.NoWorker {
		e.listener = operation.NewListener()
		e.Worker = app.New(e.DB, e.Temporal, e.settings(o), e.apiLog, e.listener).Worker()
		if err := e.Worker.Start(); err != nil {
			return nil, err
		}
	}
	if err := worker.EnsureSchedules(ctx, e.Temporal); err != nil {
		return nil, err
	}
	e.serve(o)
	if o.Bank {
		dir := e.stateDir
		if dir == "" {
			dir = filepath.Dir(o.TemporalState)
		}
		if e.Bank, err = startBank(ctx, strings.TrimPrefix(e.bankURL, "http://"), e.Server.URL+"/v1/bank/events", dir); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// startTemporal starts the Env's Temporal: a cluster, or the dev server.
func (e *Env) startTemporal(ctx context.Context, name string, o Options) (err error) {
	if o.Cluster || Clustered() {
		return e.startCluster(ctx, name)
	}
	if o.TemporalState != "" {
		e.devOptions.HostPort = FreeAddr()
	} else {
		// A SQLite file, as under `make run`, rather than the dev server's in-memory database.
		if e.stateDir, err = stateDir(e.database); err != nil {
			return err
		}
		e.devOptions.DBFile = filepath.Join(e.stateDir, "temporal.db")
	}
	if e.Dev, err = devserver.Start(ctx, e.devOptions); err != nil {
		return err
	}
	e.Temporal = e.Dev.Client()
	return nil
}

// New is Start for one test: the Env stops when t ends.
func New(t testing.TB, name string, o Options) *Env {
	t.Helper()
	e, err := Start(context.Background(), name, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// RestartTemporal stops the dev server and starts it again on the same port and state file, or
// restarts every service of the cluster. Clients and workers reconnect by themselves.
func (e *Env) RestartTemporal(t testing.TB) {
	t.Helper()
	if e.Cluster != nil {
		if err := e.Cluster.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
		return
	}
	if e.devOptions.DBFile == "" {
		t.Fatal("RestartTemporal needs Options.TemporalState")
	}
	if err := e.Dev.Stop(); err != nil {
		t.Fatal(err)
	}
	dev, err := devserver.Start(context.Background(), e.devOptions)
	if err != nil {
		t.Fatal(err)
	}
	e.Dev = dev
}

// serve starts the HTTP API on e's database and Temporal client, or on those o names. On e's
// client, with a worker here, it starts workflows eagerly and answers from the posting, as
// `payments serve` does.
func (e *Env) serve(o Options) {
	db, temporal, listener := e.DB, e.Temporal, e.listener
	if o.DB != nil {
		db = o.DB
	}
	if o.Temporal != nil {
		temporal, listener = o.Temporal, nil
	}
	if o.Split {
		listener = nil
	}
	a := app.New(db, temporal, e.settings(o), e.apiLog, listener)
	e.Transfers, e.Schedules = a.Transfers, a.Schedules
	if *e.minTTL == 0 || e.Transfers.TTL < *e.minTTL {
		*e.minTTL = e.Transfers.TTL
	}
	e.Server = httptest.NewUnstartedServer(nil)
	e.Server.Config = api.NewHTTPServer("", a.Server().Handler(), e.Transfers.Runner.SyncWait) // as the payments command serves
	e.Server.Start()
}

// NewWorker returns a worker as a worker process has it (not started), on client c, or on the
// Env's client when c is nil. Tests start one where the Env has none, or a second one.
func (e *Env) NewWorker(c client.Client) sdkworker.Worker {
	if c == nil {
		c = e.Temporal
	}
	return app.New(e.DB, c, e.settings(Options{}), e.apiLog, nil).Worker()
}

// settings are o's, or the defaults of the configuration, with the Env's bank.
func (e *Env) settings(o Options) app.Settings {
	return app.Settings{SyncWait: or(o.SyncWait, 10*time.Second), TTL: or(o.TTL, 24*time.Hour), RetryFor: or(o.RetryFor, 2*time.Minute),
		Bank: config.Bank{URL: e.bankURL, Secret: BankSecret, RetryFor: or(o.BankRetryFor, 2*time.Second),
			PollAfter: or(o.BankPollAfter, 200*time.Millisecond), ReturnWindow: or(o.ReturnWindow, 5*time.Second)},
		Webhooks: config.Webhooks{RetryFor: or(o.WebhookRetryFor, 72*time.Hour), Timeout: or(o.WebhookTimeout, 2*time.Second),
			AllowInsecure: !o.WebhookSecure, LoopbackOnly: true},
		Approvals: config.Approvals{ThresholdMinor: o.ApprovalThreshold, Timeout: or(o.ApprovalTimeout, 72*time.Hour)},
		Converter: Converter, Keys: Keys}
}

// With returns e with a second HTTP API, configured by o, in front of the same database,
// Temporal and worker; that API stops when t ends. Tests use it for a short SyncWait, a short
// TTL, or an unreachable PostgreSQL or Temporal.
func (e *Env) With(t testing.TB, o Options) *Env {
	v := *e
	v.serve(o)
	t.Cleanup(v.Server.Close)
	return &v
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Close stops everything Start started, drops the Env's database and removes the dev server's
// state. It also undoes a Start that failed half-way.
func (e *Env) Close() {
	e.Bank.Stop()
	if e.Server != nil {
		e.Server.Close()
	}
	if e.Worker != nil {
		e.Worker.Stop()
	}
	if e.DB != nil {
		e.DB.Close()
	}
	if e.Dev != nil {
		_ = e.Dev.Stop()
	}
	e.stopCluster()
	if e.stateDir != "" {
		_ = os.RemoveAll(e.stateDir)
	}
	if e.database != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, e.database); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: dropping %s: %v (the next run drops it)\n", e.database, err)
		}
	}
	for _, f := range e.logs {
		_ = f.Close()
	}
}

// keptLog is where the log called name goes: nowhere, unless the environment variable
// PAYMENTS_TEST_LOGS names a directory. .ci/run sets it and shows the most frequent lines when a
// test fails: the dev server's errors, and the cause of each 503 the test APIs answered, are
// what explain a Temporal that stopped answering.
func (e *Env) keptLog(name string) (io.Writer, error) {
	dir := os.Getenv("PAYMENTS_TEST_LOGS")
	if dir == "" {
		return io.Discard, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	e.logs = append(e.logs, f)
	return f, nil
}

// stateDir is a new directory for a dev server's SQLite file: on tmpfs where there is one, as a
// test server's state need not outlive the machine and a disk's fsyncs made the api tests take
// 90 s instead of 55 s. Its name starts with database, the Env's database name with this
// process's PID, so that later runs remove it if this process dies before removing it.
func stateDir(database string) (string, error) {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", database+stateDirInfix); err == nil {
			return dir, nil
		}
	}
	return os.MkdirTemp("", database+stateDirInfix)
}
