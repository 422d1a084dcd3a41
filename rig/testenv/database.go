package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/rig/testenv/testdb"
)

// AdminURL is the PostgreSQL the tests create their databases on; TEST_DATABASE_URL overrides it
// (testdb).
func AdminURL() string { return testdb.AdminURL() }

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
	url, err := testdb.URL(db)
	if err != nil {
		return "", err
	}
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

// PostgresAddr is the host:port of the tests' PostgreSQL.
func PostgresAddr() string {
	cfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

// FreshPool is FreshDatabase for one test: the database's URL and a pool on it, closed when t
// ends.
func FreshPool(t testing.TB, name string) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	url, err := FreshDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	db, err := database.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return url, db
}
