// Package database opens the PostgreSQL pool, creates the database when it is missing and applies
// the embedded migrations.
package database

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultMaxConns is the pool size when DATABASE_URL does not set pool_max_conns.
const DefaultMaxConns = 16

// SessionTimeouts are set on every session of the pool unless DATABASE_URL sets them (as query
// parameters of the same names), so that a client stalled inside a transaction (a process
// paused, a network that swallows packets) cannot hold a ledger lock for long (contract §10):
// its session is ended after the idle timeout and its locks released, and whoever waits on a
// lock gives up after the lock timeout with an error the callers already retry
// (Unavailable: 55P03). Both are far above what any of the processor's transactions takes: a
// posting holds its locks for milliseconds and never waits on anything outside PostgreSQL.
var SessionTimeouts = map[string]string{
	"idle_in_transaction_session_timeout": "30s",
	"lock_timeout":                        "10s",
}

// Open connects a pool to url and checks that PostgreSQL answers.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default (4 on a 2-core machine) queues requests behind postings that wait for a
		// hot account's lock; pool_max_conns in DATABASE_URL overrides this.
		cfg.MaxConns = DefaultMaxConns
	}
	for name, value := range SessionTimeouts {
		if _, set := cfg.ConnConfig.RuntimeParams[name]; !set {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, Unreachable(cfg.ConnConfig, err)
	}
	return pool, nil
}

// Unreachable turns a connection error into one line that says what to do.
func Unreachable(cfg *pgx.ConnConfig, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("PostgreSQL at %s:%d refused database %q: %s", cfg.Host, cfg.Port, cfg.Database, pgErr.Message)
	}
	return fmt.Errorf("PostgreSQL is not reachable at %s:%d (%v); start it, or set DATABASE_URL to one that is", cfg.Host, cfg.Port, rootCause(err))
}

func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// Create creates the database named in url when it does not exist yet, connecting to the
// server's "postgres" database to do so. It reports whether it created it.
func Create(ctx context.Context, url string) (bool, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return false, fmt.Errorf("DATABASE_URL: %w", err)
	}
	name := cfg.Database
	admin := cfg.Copy()
	admin.Database = "postgres"
	connCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(connCtx, admin)
	if err != nil {
		return false, Unreachable(admin, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return false, err
	}
	if exists {
		return false, nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // created concurrently by someone else
		return false, nil
	}
	return err == nil, err
}

// Migrate applies every migration not applied yet and writes one line per applied migration to
// out. Running it again applies nothing. A PostgreSQL session lock serialises concurrent
// migrators (several replicas starting at once).
func Migrate(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return err
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithSessionLocker(locker))
	if err != nil {
		return err
	}
	results, err := provider.Up(ctx)
	for _, r := range results {
		fmt.Fprintf(out, "migrate: applied %s (%s)\n", r.Source.Path, r.Duration.Round(time.Millisecond))
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(results) == 0 {
		fmt.Fprintln(out, "migrate: database is up to date")
	}
	return nil
}

// Querier is what a pool, a connection and a transaction have in common, so that a store
// function can run alone or inside a caller's transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
