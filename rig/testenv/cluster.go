package testenv

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/payments/payments/rig/cluster"
	"github.com/payments/payments/rig/testenv/testdb"
)

// Clustered says whether Envs run on a Temporal cluster (rig/cluster: four service
// processes on PostgreSQL) rather than the dev server: PAYMENTS_TEST_TEMPORAL=cluster, which
// `make test-cluster` sets, or Options.Cluster for one Env.
func Clustered() bool { return os.Getenv("PAYMENTS_TEST_TEMPORAL") == "cluster" }

// startCluster starts the Env's own cluster, on two databases named after the Env's (and
// dropped with it; a later run drops them if this process dies first).
func (e *Env) startCluster(ctx context.Context, name string) error {
	var err error
	if e.stateDir, err = stateDir(e.database); err != nil { // the bank simulator's, if any
		return err
	}
	if e.clusterDBs[0], err = databaseName(name + "_tp"); err != nil {
		return err
	}
	if e.clusterDBs[1], err = databaseName(name + "_tv"); err != nil {
		return err
	}
	for _, db := range e.clusterDBs {
		if err := dropDatabase(ctx, db); err != nil { // this process's own, from an earlier Env
			return err
		}
	}
	host, port, user, err := testdb.Server()
	if err != nil {
		return err
	}
	o := cluster.Options{Root: RepoRoot(), DBHost: host, DBPort: port, DBUser: user, DBName: e.clusterDBs[0], VisibilityDBName: e.clusterDBs[1],
		// Few connections: a package may run two Envs, each with its own cluster, beside the
		// APIs and workers, on PostgreSQL's 100.
		FrontendPort: -1, DBMaxConns: 3, VisibilityDBMaxConns: 1, Retention: 24 * time.Hour,
		LogDir: os.Getenv("PAYMENTS_TEST_LOGS"), LogPrefix: name + "-", Keys: Keys}
	if o.LogDir != "" {
		if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
			return err
		}
	}
	if e.Cluster, err = cluster.Start(ctx, o); err != nil {
		return err
	}
	e.Temporal = e.Cluster.Client()
	return nil
}

// TemporalAddr is the gRPC address of the Env's Temporal: the dev server's, or the cluster
// frontend's.
func (e *Env) TemporalAddr() string {
	if e.Cluster != nil {
		return e.Cluster.FrontendHostPort()
	}
	return e.Dev.FrontendHostPort()
}

// TemporalPids are the process ids of the Env's Temporal server: the dev server's, or the
// cluster's services'.
func (e *Env) TemporalPids() []int {
	if e.Cluster == nil {
		return []int{e.Dev.Pid()}
	}
	var pids []int
	for _, pid := range e.Cluster.Pids() {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// stopCluster stops the Env's cluster and drops its databases.
func (e *Env) stopCluster() {
	if e.Cluster != nil {
		_ = e.Cluster.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, db := range e.clusterDBs {
		if db != "" {
			_ = dropDatabase(ctx, db)
		}
	}
}
