package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/rig/supervise"
)

// Postgres is a PostgreSQL instance of the run's own: initdb in a temporary directory, on a
// port of its own, so that restarting it (a fault) never touches the machine's shared server.
type Postgres struct {
	dir, port string
	cred      *syscall.Credential // postgres refuses to run as root: it runs as user postgres then
	proc      *supervise.Child
	log       *os.File
}

// startPostgres creates an instance in dir and starts it on a free loopback port.
func startPostgres(ctx context.Context, dir string) (*Postgres, error) {
	addr, err := supervise.FreeHostPort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	pg := &Postgres{dir: dir, port: port}
	if os.Geteuid() == 0 {
		if pg.cred, err = postgresUser(); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if pg.log, err = os.Create(filepath.Join(dir, "postgres.log")); err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, pgBinary("initdb"), "-D", pg.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return pg, pg.start(ctx)
}

func (pg *Postgres) data() string { return filepath.Join(pg.dir, "data") }

// URL is the address of database name on the instance.
func (pg *Postgres) URL(name string) string {
	return "postgres://postgres@127.0.0.1:" + pg.port + "/" + name + "?sslmode=disable"
}

// Addr is the instance's host:port.
func (pg *Postgres) Addr() string { return "127.0.0.1:" + pg.port }

// start runs the server and waits until it takes connections. fsync is off: the faults kill
// processes, not the machine, and what a killed PostgreSQL wrote is in the page cache; commits
// stay synchronous (a commit answered is in the WAL), which is what the run relies on.
func (pg *Postgres) start(ctx context.Context) error {
	cmd := exec.Command(pgBinary("postgres"), "-D", pg.data(), "-p", pg.port, "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+pg.dir, "-c", "max_connections=400", "-c", "fsync=off",
		"-c", "full_page_writes=off", "-c", "shared_buffers=128MB")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	cmd.Stdout, cmd.Stderr = pg.log, pg.log
	proc, err := supervise.Start(cmd)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	pg.proc = proc
	err = supervise.WaitReady(ctx, "postgres", time.Minute, 100*time.Millisecond, proc.Err, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, pg.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%w (log %s)", err, pg.log.Name())
	}
	return err
}

// Crash stops the server the way a crash does (an immediate shutdown: every backend gone at
// once, nothing flushed), so that its next start recovers from the WAL.
func (pg *Postgres) Crash() error {
	return pg.proc.StopWith(syscall.SIGQUIT, 30*time.Second)
}

// Restart crashes the server and starts it again.
func (pg *Postgres) Restart(ctx context.Context) error {
	if err := pg.Crash(); err != nil {
		return err
	}
	return pg.start(ctx)
}

// Stop shuts the server down.
func (pg *Postgres) Stop() {
	if pg.proc != nil {
		_ = pg.proc.Stop(20 * time.Second) // an interrupt: PostgreSQL's fast shutdown
	}
	if pg.log != nil {
		pg.log.Close()
	}
}

// pgBinary finds a PostgreSQL program: on the PATH, or in Debian's versioned directory.
func pgBinary(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	return name
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("running as root, PostgreSQL needs a user postgres to run as: " + err.Error())
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
