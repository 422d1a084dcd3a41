// Package testenv gives integration tests the real parts: a database of their own on the local
// PostgreSQL, a tuned Temporal dev server from ./bin/temporal, a worker, and the HTTP API.
package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/devserver"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/transfers"
	"github.com/payments/payments/worker"
	"github.com/payments/payments/workflows"
)

// AdminURL is the PostgreSQL the tests create their databases on; TEST_DATABASE_URL overrides it.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// FreshDatabase creates a database for name, migrates it and returns its URL. name starts with
// "payments_test_"; the database is name_PID, PID this process's, so that test packages, and two
// runs on one PostgreSQL (two clones, CI and a developer), never touch each other's databases,
// nor `make run`'s. A database this process made under name earlier is dropped first. An Env
// drops its database when it closes; the databases and dev server state directories of processes
// that are gone (which died, or used FreshDatabase alone), FreshDatabase removes.
func FreshDatabase(ctx context.Context, name string) (string, error) {
	db, err := databaseName(name)
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return "", fmt.Errorf("tests need PostgreSQL at %s: %w", AdminURL(), err)
	}
	defer admin.Close(ctx)
	dropLeftovers(ctx, admin)
	ident := pgx.Identifier{db}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil { // this process's own
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", err
	}
	cfg, _ := pgx.ParseConfig(AdminURL())
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, db)
	pool, err := database.Open(ctx, url)
	if err != nil {
		_ = dropDatabase(ctx, db)
		return "", err
	}
	defer pool.Close()
	if err := database.Migrate(ctx, pool, io.Discard); err != nil {
		pool.Close()
		_ = dropDatabase(ctx, db)
		return "", err
	}
	return url, nil
}

// RepoRoot is the directory holding go.mod.
func RepoRoot() string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Env is one running system: database, Temporal, a worker and the HTTP API on one client, so
// that transfers start eagerly as under `payments serve`.
type Env struct {
	URL       string // the test database
	DB        *pgxpool.Pool
	Ledger    *ledger.Ledger
	Temporal  client.Client
	Transfers *transfers.Service
	Server    *httptest.Server
	Dev       *devserver.Server
	Worker    sdkworker.Worker // nil with Options.NoWorker
	minTTL    *time.Duration   // the shortest idempotency TTL any of the Env's APIs used

	devOptions devserver.Options
	database   string             // the test database's name, dropped by Close
	stateDir   string             // the dev server's state, removed by Close
	apiLog     *slog.Logger       // the APIs' warnings, if kept (PAYMENTS_TEST_LOGS)
	logs       []*os.File         // kept logs, closed by Close
	posted     *activities.Posted // shared by the worker and the APIs on the Env's own client
}

// Options change an Env from its defaults.
type Options struct {
	SyncWait time.Duration // default 10s
	TTL      time.Duration // default 24h
	RetryFor time.Duration // default 2m
	DB       *pgxpool.Pool // the API's database, default the Env's
	Temporal client.Client // the API's Temporal client, default the Env's (with eager start)

	// For Start only.
	DatabaseHost  string // host:port the Env reaches PostgreSQL through (a Proxy); default direct
	NoWorker      bool   // run no worker here: the test runs its own (no eager start then)
	TemporalState string // the dev server's SQLite file, so that RestartTemporal keeps its state
}

// Start brings up an Env on a fresh database for name (see FreshDatabase). Call it from TestMain
// and Close it after m.Run. If Start fails, it stops what it had started. Whatever happens to
// this process, its dev server dies with it (see devserver.StartChild), and a later Start drops
// its database and the dev server's state.
func Start(ctx context.Context, name string, o Options) (_ *Env, err error) {
	url, err := FreshDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	e := &Env{URL: url, minTTL: new(time.Duration), devOptions: devserver.Options{
		Binary: filepath.Join(RepoRoot(), "bin", "temporal"), DBFile: o.TemporalState}}
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
	if o.TemporalState != "" {
		e.devOptions.HostPort = FreeAddr()
	} else {
		// A SQLite file, as under `make run`, rather than the dev server's in-memory database.
		if e.stateDir, err = stateDir(e.database); err != nil {
			return nil, err
		}
		e.devOptions.DBFile = filepath.Join(e.stateDir, "temporal.db")
	}
	if e.Dev, err = devserver.Start(ctx, e.devOptions); err != nil {
		return nil, err
	}
	e.Temporal = e.Dev.Client()
	if o.DatabaseHost != "" {
		url = strings.Replace(url, PostgresAddr(), o.DatabaseHost, 1)
	}
	if e.DB, err = database.Open(ctx, url); err != nil {
		return nil, err
	}
	e.Ledger = &ledger.Ledger{DB: e.DB}
	if !o.NoWorker {
		e.posted = activities.NewPosted()
		stale := &transfers.Service{Ledger: e.Ledger, Temporal: e.Temporal, TTL: or(o.TTL, 24*time.Hour), RetryFor: or(o.RetryFor, 2*time.Minute)}
		e.Worker = worker.New(e.Temporal, &activities.Activities{Ledger: e.Ledger, Posted: e.posted, Stale: stale})
		if err := e.Worker.Start(); err != nil {
			return nil, err
		}
	}
	if err := worker.EnsureSchedules(ctx, e.Temporal); err != nil {
		return nil, err
	}
	if o.NoWorker && o.Temporal == nil {
		o.Temporal = e.Temporal // the API's own client, without eager start
	}
	e.serve(o)
	return e, nil
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

// RestartTemporal stops the dev server and starts it again on the same port and state file.
// Clients and workers reconnect by themselves.
func (e *Env) RestartTemporal(t testing.TB) {
	t.Helper()
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

// PostgresAddr is the host:port of the tests' PostgreSQL.
func PostgresAddr() string {
	cfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

// FreeAddr is a local host:port nothing listens on now.
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve starts the HTTP API on e's database and Temporal client, or on those o names.
func (e *Env) serve(o Options) {
	db, temporal := e.DB, e.Temporal
	if o.DB != nil {
		db = o.DB
	}
	if o.Temporal != nil {
		temporal = o.Temporal
	}
	var posted *activities.Posted
	if o.Temporal == nil {
		posted = e.posted
	}
	e.Transfers = &transfers.Service{Ledger: &ledger.Ledger{DB: db}, Temporal: temporal, Eager: o.Temporal == nil, Posted: posted,
		SyncWait: or(o.SyncWait, 10*time.Second), TTL: or(o.TTL, 24*time.Hour), RetryFor: or(o.RetryFor, 2*time.Minute)}
	if *e.minTTL == 0 || e.Transfers.TTL < *e.minTTL {
		*e.minTTL = e.Transfers.TTL
	}
	srv := &api.Server{DB: db, Ledger: &ledger.Ledger{DB: db}, Transfers: e.Transfers, Temporal: temporal,
		TTL: e.Transfers.TTL, Log: e.apiLog}
	e.Server = httptest.NewUnstartedServer(nil)
	e.Server.Config = api.NewHTTPServer("", srv.Handler(), e.Transfers.SyncWait) // as the payments command serves
	e.Server.Start()
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

// Owner issues a new API key for a new owner and returns (owner id, key).
func (e *Env) Owner(t testing.TB) (string, string) {
	t.Helper()
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	key, id, err := auth.CreateKey(context.Background(), e.DB, name)
	if err != nil {
		t.Fatal(err)
	}
	return id, key
}

// Response is an HTTP answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, r.Body)
	}
	return m
}

// Request builds a request to the API with the API key (when not empty) and a JSON body.
func (e *Env) Request(t testing.TB, method, path, apiKey, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, e.Server.URL+path, bytes.NewReader([]byte(body)))
	if err != nil {
		panic(err) // a malformed path in the test itself
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// Send sends req and reads the whole answer. A transport error fails t and returns a Response
// with Status 0; Send does not stop the test, so that goroutines may call it.
func Send(t testing.TB, req *http.Request) Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
		return Response{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Do sends one request with the API key and, when idemKey is not empty, an Idempotency-Key.
func (e *Env) Do(t testing.TB, method, path, apiKey, idemKey, body string) Response {
	t.Helper()
	req := e.Request(t, method, path, apiKey, body)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	return Send(t, req)
}

// Account opens an account through the API and returns its id.
func (e *Env) Account(t testing.TB, apiKey, currency string) string {
	t.Helper()
	r := e.Do(t, "POST", "/v1/accounts", apiKey, fmt.Sprintf("acc-%d", time.Now().UnixNano()), `{"currency":"`+currency+`"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("open account: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

// Fund deposits amount into account from its currency's funding account, as `payments deposit`
// does (through the transfer workflow), for tests that need a starting balance.
func (e *Env) Fund(t testing.TB, account string, amount int64) {
	t.Helper()
	answer, err := e.Transfers.Deposit(context.Background(), account, amount, ledger.NewID("fund-"))
	if err != nil || answer.Status != http.StatusCreated {
		t.Fatalf("deposit: %v %s", err, answer.Body)
	}
}

// Balance reads an account's balance from the ledger.
func (e *Env) Balance(t testing.TB, account string) int64 {
	t.Helper()
	acc, err := e.Ledger.Account(context.Background(), "", account)
	if err != nil {
		t.Fatal(err)
	}
	return acc.BalanceMinor
}

// Count runs a count query.
func (e *Env) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Hold locks account against postings until release is called (or t ends). A posting's FOR NO
// KEY UPDATE waits for this one, while claiming a transfer (whose foreign keys take KEY SHARE)
// goes through: a transfer from or to account is claimed, started, and then waits.
func (e *Env) Hold(t testing.TB, account string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.URL) // its own connection: the pool is the system's
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, account); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = conn.Close(ctx) }) } // closing ends the transaction
	t.Cleanup(release)
	return release
}

// Waiting counts the transactions of the test database waiting for a lock, such as postings
// behind Hold.
func (e *Env) Waiting(t testing.TB) int {
	return e.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
}

// WaitFor polls cond until it holds, failing t after a minute. It waits for a state of the
// system, never for a length of time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Executions lists the runs under workflow ID id, once visibility shows at least one and none
// running.
func (e *Env) Executions(t testing.TB, id string) []*workflowpb.WorkflowExecutionInfo {
	t.Helper()
	var runs []*workflowpb.WorkflowExecutionInfo
	WaitFor(t, "the runs of "+id+" to be visible and closed", func() bool {
		resp, err := e.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", id),
		})
		if err != nil {
			t.Fatal(err)
		}
		runs = resp.GetExecutions()
		for _, r := range runs {
			if r.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
				return false
			}
		}
		return len(runs) > 0
	})
	return runs
}

// RunCleanup triggers the idempotency cleanup Schedule and returns what the pass it started did.
func (e *Env) RunCleanup(t testing.TB) (res activities.CleanupResult) {
	t.Helper()
	e.RunSchedule(t, workflows.CleanupScheduleID, &res)
	return res
}

// RunSchedule triggers the Temporal Schedule scheduleID (such as workflows.RecoveryScheduleID),
// waits for the run it started and decodes that run's result into result (a pointer, or nil to
// only wait).
func (e *Env) RunSchedule(t testing.TB, scheduleID string, result any) {
	t.Helper()
	ctx := context.Background()
	h := e.Temporal.ScheduleClient().GetHandle(ctx, scheduleID)
	latest := func() (run client.ScheduleWorkflowExecution) {
		d, err := h.Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(d.Info.RecentActions); n > 0 {
			run = *d.Info.RecentActions[n-1].StartWorkflowResult
		}
		return run
	}
	before := latest()
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{Overlap: enums.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}); err != nil {
		t.Fatal(err)
	}
	var run client.ScheduleWorkflowExecution
	WaitFor(t, "the "+scheduleID+" Schedule to start a run", func() bool { run = latest(); return run != before })
	if err := e.Temporal.GetWorkflow(ctx, run.WorkflowID, run.FirstExecutionRunID).Get(ctx, result); err != nil {
		t.Fatalf("the %s run %s: %v", scheduleID, run.WorkflowID, err)
	}
}

// CheckLedger reconciles the Env's ledger and returns the report as an error when an invariant
// is broken.
func (e *Env) CheckLedger() error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.URL) // directly, not through a Proxy a test may have cut
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	report, err := ledger.Reconcile(ctx, conn, *e.minTTL)
	if err != nil {
		return err
	}
	if !report.OK() {
		var b bytes.Buffer
		report.Print(&b)
		return errors.New(b.String())
	}
	return nil
}

// Reconcile fails t unless every ledger invariant holds.
func (e *Env) Reconcile(t testing.TB) {
	t.Helper()
	if err := e.CheckLedger(); err != nil {
		t.Fatalf("reconcile:\n%v", err)
	}
}

// BuildPayments builds the payments command into a temporary directory, for tests that run it
// as a process they can kill.
func BuildPayments(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "payments")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/payments")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Process starts bin with args and the Env's database and Temporal (or temporalAddr when not
// empty) in its environment. It is killed when t ends, or when this process dies (see
// devserver.StartChild), and its stderr shown if t failed. The caller may kill it, but must not
// Wait for it.
func (e *Env) Process(t testing.TB, bin, temporalAddr string, args []string, env ...string) *exec.Cmd {
	t.Helper()
	if temporalAddr == "" {
		temporalAddr = e.Dev.FrontendHostPort()
	}
	cmd := exec.Command(bin, args...)
	// A small pool: test packages run in parallel, each with several processes, against one
	// PostgreSQL with max_connections 100 by default. env may set DATABASE_URL again; the last
	// one wins.
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+e.URL+"&pool_max_conns=4", "TEMPORAL_ADDRESS="+temporalAddr), env...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	child, err := devserver.StartChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Kill()
		if t.Failed() {
			t.Logf("%s %v log:\n%s", filepath.Base(bin), args, logs.String())
		}
	})
	return cmd
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Settled waits for the latest run of workflow id to close and returns how it closed. An API
// in the worker's process answers when the posting commits, a moment before Temporal records
// the workflow's completion.
func (e *Env) Settled(t testing.TB, id string) enums.WorkflowExecutionStatus {
	t.Helper()
	ctx := context.Background()
	_ = e.Temporal.GetWorkflow(ctx, id, "").Get(ctx, nil) // a failed run is an error here; its status says so
	desc, err := e.Temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	return desc.GetWorkflowExecutionInfo().GetStatus()
}

// Run runs the package's tests on e, then fails the run if they left a ledger that does not
// reconcile, and closes e. TestMain returns its result to os.Exit.
func Run(m *testing.M, e *Env) int {
	code := m.Run()
	if err := e.CheckLedger(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "the tests left a ledger that does not reconcile:\n"+err.Error())
		code = 1
	}
	e.Close()
	return code
}

// FundedAccounts opens n USD accounts for apiKey's owner, each funded with amount.
func (e *Env) FundedAccounts(t testing.TB, apiKey string, n int, amount int64) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.Account(t, apiKey, "USD")
		e.Fund(t, ids[i], amount)
	}
	return ids
}

// TransferBody is a POST /v1/transfers body in USD, described as rent.
func TransferBody(from, to string, amount int64) string {
	return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD","description":"rent"}`, from, to, amount)
}

// Pair picks two distinct indexes below n.
func Pair(rng *rand.Rand, n int) (int, int) {
	a, b := rng.IntN(n), rng.IntN(n-1)
	if b >= a {
		b++
	}
	return a, b
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
