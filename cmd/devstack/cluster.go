package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/rig/cluster"
	"github.com/payments/payments/rig/supervise"
)

// clusterDir holds make run-cluster's logs and the bank simulator's state. The Temporal
// cluster's state is in PostgreSQL (databases temporal and temporal_visibility).
var clusterDir = filepath.Join(".data", "cluster")

// clusterDatabase is the ledger's database under make run-cluster, unless DATABASE_URL says
// otherwise: not make run's, whose workflows live in the dev server's state, not the cluster's.
const clusterDatabase = "payments_cluster"

// runCluster is make run-cluster: the Temporal cluster (four service processes on PostgreSQL,
// its UI), the bank simulator, two workers and two APIs, each a process of its own; on Ctrl-C,
// the APIs stop first and the cluster last.
func runCluster(ctx context.Context) error {
	if os.Getenv("DATABASE_URL") == "" {
		os.Setenv("DATABASE_URL", "postgres://postgres@localhost:5432/"+clusterDatabase+"?sslmode=disable")
	}
	codecAddr, err := codecSettings(clusterDir, strconv.Itoa(clusterUIPort))
	if err != nil {
		return err
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	db, err := prepareDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()

	pg, err := url.Parse(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	c, err := cluster.Start(ctx, cluster.Options{Root: root, DBHost: pg.Hostname(), DBPort: portOr(pg, "5432"), DBUser: pg.User.Username(),
		UIPort: clusterUIPort, LogDir: clusterDir, Out: os.Stdout, PprofPort: pprofPort(),
		Keys: cfg.Temporal.Keys, CodecEndpoint: localURL(codecAddr)})
	if err != nil {
		return fmt.Errorf("the Temporal cluster: %w (is `make run` or another Temporal on port 7233 or 8233? logs in %s)", err, clusterDir)
	}
	defer func() {
		step("Stopping the Temporal cluster")
		_ = c.Stop()
	}()

	if err := buildPayments(ctx, makeRun.payments); err != nil {
		return err
	}
	stopCodec, err := startCodecServer(makeRun.payments, clusterDir, codecAddr)
	if err != nil {
		return err
	}
	defer stopCodec()
	apis, workers := clusterProcesses()
	step("Starting the bank simulator (%s, mild faults; state and log in %s)", cfg.Bank.URL, clusterDir)
	stopBank, err := startBank(makeRun.payments, clusterDir, localURL(apis[0].addr)+"/v1/bank/events")
	if err != nil {
		return err
	}
	defer stopBank()

	var procs processes
	defer func() { procs.stop() }() // the processes started by then
	exited := make(chan error, 4)
	step("Starting two workers (payments worker, metrics on %s and %s; logs in %s)", workers[0].addr, workers[1].addr, clusterDir)
	if err := procs.startAll(exited, workers); err != nil {
		return err
	}
	step("Starting two APIs (payments api on %s and %s; logs in %s)", apis[0].addr, apis[1].addr, clusterDir)
	if err := procs.startAll(exited, apis); err != nil {
		return err
	}
	for _, p := range apis {
		if err := waitReady(ctx, p.name, localURL(p.addr), received(exited)); err != nil {
			return err
		}
	}

	step("Seeding demo owners and accounts")
	accounts, err := seed(ctx, db, makeRun.payments)
	if err != nil {
		return err
	}
	if err := writeDemoEnv(clusterDir, localURL(apis[0].addr), cfg.Bank.URL, accounts); err != nil {
		return err
	}
	banner(localURL(apis[0].addr), localURL(loopback(strconv.Itoa(clusterUIPort))), cfg.Bank.URL, filepath.Join(clusterDir, demoEnv), accounts, fmt.Sprintf(`  API, again   %s            (a second API process; both take any request)
  Cluster      Temporal %s, 4 history shards, services frontend, history, matching, worker
               (processes of their own, on PostgreSQL: databases temporal, temporal_visibility)
  Workers      two payments worker processes (metrics %s/metrics, %s/metrics)
  Logs         %s/
  Commands     export DATABASE_URL='%s'   (the ledger of make run-cluster)
`, localURL(apis[1].addr), temporalServerVersion, localURL(workers[0].addr), localURL(workers[1].addr), clusterDir, cfg.DatabaseURL))

	select {
	case <-ctx.Done():
		fmt.Println()
		return nil
	case err := <-exited:
		return err
	}
}

// clusterUIPort is the Temporal UI's, on 127.0.0.1 like every port of the cluster
// (deploy/temporal/cluster.yaml, deploy/temporal/ui/cluster.yaml).
const clusterUIPort = 8233

// process is one payments process of make run-cluster: command, listening on addr.
type process struct{ name, command, variable, addr string }

// env is what the process is told to listen on.
func (p process) env() string { return p.variable + "=" + p.addr }

// clusterProcesses are the two APIs and the two workers (their metrics), on loopback only: the
// demo keys are well known and webhooks may aim at local services.
func clusterProcesses() (apis, workers []process) {
	for i, port := range []string{config.HTTPPort, "8081"} {
		apis = append(apis, process{fmt.Sprintf("api-%d", i+1), "api", "PAYMENTS_HTTP_ADDR", loopback(port)})
	}
	for i, port := range []string{config.MetricsPort, "9091"} {
		workers = append(workers, process{fmt.Sprintf("worker-%d", i+1), "worker", "PAYMENTS_METRICS_ADDR", loopback(port)})
	}
	return apis, workers
}

// temporalServerVersion is the server the Makefile builds (TEMPORAL_SERVER_VERSION).
const temporalServerVersion = "v1.29.1"

func portOr(u *url.URL, def string) string {
	if p := u.Port(); p != "" {
		return p
	}
	return def
}

// processes are the payments processes of make run-cluster.
type processes []*supervise.Child

// start runs bin/payments with args, with env added to its environment and its output in
// clusterDir/name.log; exited hears if it ends.
func (ps *processes) start(exited chan<- error, name, env string, args ...string) error {
	proc, err := startLogged(filepath.Join(clusterDir, name+".log"), makeRun.payments, []string{env}, args...)
	if err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	*ps = append(*ps, proc)
	go func() {
		err := proc.Wait()
		exited <- fmt.Errorf("%s exited (%v); see %s", name, err, filepath.Join(clusterDir, name+".log"))
	}()
	return nil
}

func (ps *processes) startAll(exited chan<- error, list []process) error {
	for _, p := range list {
		if err := ps.start(exited, p.name, p.env(), p.command); err != nil {
			return err
		}
	}
	return nil
}

// stop interrupts the processes, the last started (the APIs) first, and waits for each.
func (ps processes) stop() {
	if len(ps) > 0 {
		step("Stopping the APIs and the workers")
	}
	for _, p := range slices.Backward(ps) {
		_ = p.Stop(stopWithin)
	}
}

// received is, for waitReady, the first error exited carries, if one has come yet.
func received(exited <-chan error) func() error {
	return func() error {
		select {
		case err := <-exited:
			return err
		default:
			return nil
		}
	}
}

// pprofPort is TEMPORAL_PPROF_PORT: when set, the Temporal services serve their profiles on it
// and the ports after it, in the order of cluster.Services (docs/benchmarks.md, "Profiling").
func pprofPort() int {
	port, _ := strconv.Atoi(os.Getenv("TEMPORAL_PPROF_PORT"))
	return port
}
