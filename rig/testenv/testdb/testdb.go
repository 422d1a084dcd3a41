// Package testdb says which PostgreSQL the tests use: TEST_DATABASE_URL, the one variable the
// tests read for it (README, "The two commands"). It imports nothing of this module, so that any
// package's tests can use it, also those of packages rig/testenv imports (transfers).
package testdb

import (
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Variable names the tests' PostgreSQL: the URL of a database the tests connect to as a user
// that may create and drop databases. The tests never read DATABASE_URL: it names make run's
// ledger, which they must not touch.
const Variable = "TEST_DATABASE_URL"

// AdminURL is the URL the tests create and drop their databases through: TEST_DATABASE_URL, or
// PostgreSQL on 127.0.0.1:5432 as postgres.
func AdminURL() string {
	if u := os.Getenv(Variable); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// URL is the URL of the database name on the tests' PostgreSQL, as the same user (and password).
// Its host:port is written out, as testenv.PostgresAddr is: the fault tests put a proxy there.
func URL(name string) (string, error) {
	cfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		return "", fmt.Errorf("%s: %w", Variable, err)
	}
	user := url.User(cfg.User)
	if cfg.Password != "" {
		user = url.UserPassword(cfg.User, cfg.Password)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", user, cfg.Host, cfg.Port, name), nil
}

// Server is where the tests' PostgreSQL is and the user they connect as, for what takes them
// apart (a Temporal cluster's persistence, rig/cluster.Options).
func Server() (host, port, user string, err error) {
	cfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		return "", "", "", fmt.Errorf("%s: %w", Variable, err)
	}
	return cfg.Host, strconv.Itoa(int(cfg.Port)), cfg.User, nil
}
