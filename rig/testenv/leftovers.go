package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Every database and dev server state directory of the tests is named after the process that
// made it: prefix, the name the test gave, "_", that process's PID. Whatever the process does not
// remove itself, because it panicked, hit -timeout or was killed, a later run removes once no
// process with that PID is alive on this machine. The dev server and the processes a test starts
// die with the test process (supervise.Start), so nothing holds on to them by then.
const prefix = "payments_test_"

// stateDirInfix separates a state directory's database name from os.MkdirTemp's random suffix.
const stateDirInfix = "-temporal-"

// maxIdentifier is PostgreSQL's limit on a name, in bytes; longer ones are cut, silently.
const maxIdentifier = 63

var (
	databaseOfPID = regexp.MustCompile(`^` + prefix + `[a-z0-9_]*_([0-9]+)$`)
	stateDirOfPID = regexp.MustCompile(`^(` + prefix + `[a-z0-9_]*_[0-9]+)` + stateDirInfix + `[0-9]+$`)
)

// databaseName is this process's database for name.
func databaseName(name string) (string, error) {
	db := fmt.Sprintf("%s_%d", name, os.Getpid())
	switch {
	case !strings.HasPrefix(name, prefix):
		return "", fmt.Errorf("test database %q: the name must start with %q, for later runs to drop it if this one cannot", name, prefix)
	case !databaseOfPID.MatchString(db):
		return "", fmt.Errorf("test database %q: use lower-case letters, digits and _", name)
	case len(db) > maxIdentifier:
		return "", fmt.Errorf("test database %q: %s is longer than PostgreSQL's %d bytes", name, db, maxIdentifier)
	}
	return db, nil
}

// ownerGone says whether name (a database, or a state directory's database name) belongs to a
// process that no longer exists. A name not made by this package has no owner to check, and is
// never gone.
func ownerGone(name string) bool {
	m := databaseOfPID.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return !processAlive(pid)
}

// dropLeftovers drops the test databases, and removes the dev server state directories, of
// processes that are gone. It does its best: another run may be dropping the same ones, and
// whatever it misses the next run drops.
func dropLeftovers(ctx context.Context, admin *pgx.Conn) {
	removeLeftoverStateDirs()
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1)`, prefix)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		if ownerGone(name) {
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
	}
}

// dropDatabase drops database name of this process.
func dropDatabase(ctx context.Context, name string) error {
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// removeLeftoverStateDirs removes the dev server state directories of processes that are gone.
func removeLeftoverStateDirs() {
	for _, dir := range []string{"/dev/shm", os.TempDir()} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, entry := range entries {
			m := stateDirOfPID.FindStringSubmatch(entry.Name())
			if m != nil && entry.IsDir() && ownerGone(m[1]) {
				_ = os.RemoveAll(filepath.Join(dir, entry.Name()))
			}
		}
	}
}
