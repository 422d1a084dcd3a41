package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/operatorservice/v1"

	"github.com/payments/payments/rig/cluster"
	"github.com/payments/payments/rig/testenv/testdb"
	"github.com/payments/payments/workflows"
)

func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// The cluster starts on databases of its own, registers what the workflows need, and starts
// again on the same state (its schema steps are safe to repeat).
func TestClusterStartsAndStartsAgain(t *testing.T) {
	if _, err := os.Stat(filepath.Join(root(t), "bin", "temporal-server", "server")); err != nil {
		t.Fatal("the Temporal server is not built: make bin/temporal-server/server")
	}
	ctx := context.Background()
	db := fmt.Sprintf("payments_test_cluster_%d", os.Getpid())
	t.Cleanup(func() { dropDatabases(t, db, db+"_visibility") })
	host, port, user, err := testdb.Server()
	if err != nil {
		t.Fatal(err)
	}
	o := cluster.Options{Root: root(t), DBHost: host, DBPort: port, DBUser: user, DBName: db, VisibilityDBName: db + "_visibility",
		FrontendPort: -1, DBMaxConns: 4, LogDir: logDir(t)}
	for run := range 2 {
		c, err := cluster.Start(ctx, o)
		if err != nil {
			t.Fatalf("start %d: %v", run+1, err)
		}
		resp, err := c.Client().OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		for name, kind := range workflows.SearchAttributeTypes {
			if resp.GetCustomAttributes()[name] != kind {
				t.Errorf("start %d: search attribute %s is %v, want %v", run+1, name, resp.GetCustomAttributes()[name], kind)
			}
		}
		if len(c.Pids()) != len(cluster.Services) {
			t.Errorf("start %d: %d service processes, want %d", run+1, len(c.Pids()), len(cluster.Services))
		}
		if err := c.Stop(); err != nil {
			t.Fatalf("stop %d: %v", run+1, err)
		}
	}
}

func dropDatabases(t *testing.T, names ...string) {
	conn, err := pgx.Connect(context.Background(), testdb.AdminURL())
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(context.Background())
	for _, n := range names {
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	}
}

// logDir keeps the services' logs where PAYMENTS_TEST_LOGS says (CI shows them when a test
// fails), or in a directory of the test's own.
func logDir(t *testing.T) string {
	if d := os.Getenv("PAYMENTS_TEST_LOGS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}
