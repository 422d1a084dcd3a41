package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/rig/cluster"
	"github.com/payments/payments/rig/proxy"
	"github.com/payments/payments/rig/supervise"
)

// bankSecret signs the run's bank callbacks.
const bankSecret = "chaos-bank-secret"

// system is the production topology of `make run-cluster`, every part a process of its own,
// on a PostgreSQL of the run's own: the Temporal cluster (four services), the bank simulator,
// two workers and two APIs. The payments processes reach PostgreSQL through a proxy the faults
// cut; the Temporal services reach it directly (a restart of PostgreSQL reaches them too).
type system struct {
	dir      string
	bin      string // the payments command
	pg       *Postgres
	db       *pgxpool.Pool // the run's own connection to the ledger, not through the proxy
	dbProxy  *proxy.Proxy
	temporal *cluster.Cluster
	bankURL  string

	mu       sync.Mutex
	procs    map[string]*process // "api-1", "worker-2", "bank"
	restarts int                 // processes the supervisor started again after they exited by themselves
	stopping bool
}

// process is one payments process: how to start it again after a kill.
type process struct {
	name string
	args []string
	env  []string
	url  string // an API's base URL
	ch   *supervise.Child
	log  *os.File
	down bool // killed by a fault, to be started by it: the supervisor leaves it alone
}

// startSystem brings up the whole topology under dir, saying what it does on out.
func startSystem(ctx context.Context, dir, bin, root string, out io.Writer) (_ *system, err error) {
	s := &system{dir: dir, bin: bin, procs: map[string]*process{}}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	step(out, "Starting a PostgreSQL of the run's own (initdb in %s)", dir)
	pgDir := filepath.Join(dir, "pg")
	if err := os.MkdirAll(pgDir, 0o700); err != nil {
		return nil, err
	}
	if s.pg, err = startPostgres(ctx, pgDir); err != nil {
		return nil, err
	}
	url := s.pg.URL("payments")
	if _, err := database.Create(ctx, url); err != nil {
		return nil, err
	}
	if s.db, err = database.Open(ctx, url); err != nil {
		return nil, err
	}
	if err := database.Migrate(ctx, s.db, io.Discard); err != nil {
		return nil, err
	}
	if s.dbProxy, err = proxy.New(s.pg.Addr()); err != nil {
		return nil, err
	}

	step(out, "Starting a Temporal cluster on it (four service processes; the first time, a minute)")
	_, port, _ := net.SplitHostPort(s.pg.Addr())
	codecKeys := keyring.Generate("chaos") // the run's own: its processes seal what they write to Temporal
	keys, _ := keyring.Parse(codecKeys)
	if s.temporal, err = cluster.Start(ctx, cluster.Options{Root: root, DBHost: "127.0.0.1", DBPort: port, DBUser: "postgres",
		FrontendPort: -1, LogDir: dir, Shards: 4, DBMaxConns: 20, Keys: keys}); err != nil {
		return nil, err
	}

	addr := func() string { a, _ := supervise.FreeHostPort(); return a }
	apiAddrs := []string{addr(), addr()}
	bankAddr := addr()
	s.bankURL = "http://" + bankAddr
	common := []string{
		"DATABASE_URL=postgres://postgres@" + s.dbProxy.Addr() + "/payments?sslmode=disable&pool_max_conns=10",
		"TEMPORAL_ADDRESS=" + s.temporal.FrontendHostPort(),
		"PAYMENTS_BANK_URL=" + s.bankURL, "PAYMENTS_BANK_SECRET=" + bankSecret, "PAYMENTS_CODEC_KEYS=" + codecKeys,
		// Short waits, so that a run drains in seconds: an answer after 2s is a 202 the client
		// asks again about; a payout asks the bank after 2s without a callback, and its return
		// window closes after 3s.
		"PAYMENTS_SYNC_WAIT=2s", "PAYMENTS_BANK_POLL_AFTER=2s", "PAYMENTS_PAYOUT_RETURN_WINDOW=3s",
		"PAYMENTS_BANK_RETRY_FOR=10m", "PAYMENTS_TRANSFER_RETRY_FOR=2m",
		// The owners' webhook receiver is the run's own, on loopback, over http; a slow answer
		// holds an endpoint back for a second.
		"PAYMENTS_WEBHOOK_ALLOW_INSECURE=true", "PAYMENTS_WEBHOOK_TIMEOUT=" + webhookTimeout.String(),
		// The workload is many clients on a few keys, faster than a client of the default rate
		// may go; the rate limit has tests of its own (cmd/payments).
		"PAYMENTS_RATE_LIMIT=1000000",
	}
	step(out, "Starting the bank simulator (faults on), two workers and two APIs")
	s.add(&process{name: "bank", args: []string{"banksim", "--addr", bankAddr, "--callback-url", "http://" + apiAddrs[0] + "/v1/bank/events",
		"--state", filepath.Join(dir, "banksim.json"), "--seed", "1", "--settle-after", "200ms", "--callback-retry-base", "200ms",
		"--latency", "10ms", "--error-rate", "0.05", "--lost-answer-rate", "0.05", "--fail-rate", "0.05",
		"--return-rate", "0.05", "--return-after", "1s", "--callback-drop-rate", "0.1", "--callback-dup-rate", "0.1",
		"--callback-delay", "300ms"}, env: []string{"PAYMENTS_BANK_SECRET=" + bankSecret}})
	for i := range 2 {
		s.add(&process{name: fmt.Sprintf("worker-%d", i+1), args: []string{"worker"},
			env: append(common, "PAYMENTS_METRICS_ADDR="+addr())})
	}
	for i, a := range apiAddrs {
		s.add(&process{name: fmt.Sprintf("api-%d", i+1), args: []string{"api"}, url: "http://" + a,
			env: append(common, "PAYMENTS_HTTP_ADDR="+a)})
	}
	for _, name := range []string{"bank", "worker-1", "worker-2", "api-1", "api-2"} {
		if err := s.start(name); err != nil {
			return nil, err
		}
	}
	for _, api := range s.apis() {
		if err := waitReady(ctx, api+"/readyz", 90*time.Second); err != nil {
			return nil, err
		}
	}
	go s.supervise(ctx)
	return s, nil
}

func (s *system) add(p *process) { s.procs[p.name] = p }

// start starts process name (again).
func (s *system) start(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.procs[name]
	if p.log == nil {
		f, err := os.Create(filepath.Join(s.dir, name+".log"))
		if err != nil {
			return err
		}
		p.log = f
	}
	p.down = false
	cmd := exec.Command(s.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	ch, err := supervise.Start(cmd)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	p.ch = ch
	return nil
}

// kill sends SIGKILL to process name and waits for it to go; it stays down until start.
func (s *system) kill(name string) {
	s.mu.Lock()
	p := s.procs[name]
	p.down = true
	s.mu.Unlock()
	_ = p.ch.Kill()
}

// supervise starts again, until ctx ends, any process that exited by itself: a payments
// process exits when PostgreSQL or Temporal does not answer as it starts (a fault elsewhere may
// be under way), a Temporal service when PostgreSQL does not. Production's supervisor
// (docker-compose's restart policy, systemd, Kubernetes) does the same.
func (s *system) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		s.restartExited()
	}
}

// restartExited starts again the processes that exited by themselves, and says whether all
// were running.
func (s *system) restartExited() bool {
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping {
		return true
	}
	all := true
	for _, name := range []string{"bank", "worker-1", "worker-2", "api-1", "api-2"} {
		s.mu.Lock()
		p := s.procs[name]
		exited := !p.down && p.ch != nil && p.ch.Err() != nil
		s.mu.Unlock()
		if exited {
			all = false
			if s.start(name) == nil {
				s.mu.Lock()
				s.restarts++
				s.mu.Unlock()
			}
		}
	}
	for _, service := range s.temporal.Exited() {
		all = false
		if s.temporal.StartService(service) == nil {
			s.mu.Lock()
			s.restarts++
			s.mu.Unlock()
		}
	}
	return all
}

// signal sends sig (SIGSTOP, SIGCONT) to process name.
func (s *system) signal(name string, sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.procs[name].ch.Cmd.Process.Signal(sig)
}

// apis are the base URLs of the APIs.
func (s *system) apis() []string {
	return []string{s.procs["api-1"].url, s.procs["api-2"].url}
}

// stop stops everything, the APIs first and PostgreSQL last.
func (s *system) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	for _, name := range []string{"api-1", "api-2", "worker-1", "worker-2", "bank"} {
		if p := s.procs[name]; p != nil && p.ch != nil {
			_ = p.ch.Kill()
			p.log.Close()
		}
	}
	if s.temporal != nil {
		_ = s.temporal.Stop()
	}
	if s.dbProxy != nil {
		s.dbProxy.Close()
	}
	if s.db != nil {
		s.db.Close()
	}
	if s.pg != nil {
		s.pg.Stop()
	}
}

// waitReady waits until url answers 200.
func waitReady(ctx context.Context, url string, within time.Duration) error {
	return supervise.WaitReady(ctx, url, within, 200*time.Millisecond, nil, supervise.HTTPReady(url))
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "==> "+format+"\n", args...)
}
