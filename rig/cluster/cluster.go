// Package cluster runs a real Temporal cluster on this machine, the production topology in
// small: the Temporal server (built from the version the pinned CLI embeds) with persistence
// and visibility on the local PostgreSQL, several history shards, and its four services
// (frontend, history, matching, worker) as separate processes, each a child of this process
// that dies with it. `make run-cluster` and the cluster tests start it; deploy/temporal holds
// its configuration, which docker-compose.yml uses too.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/rig/supervise"
	"github.com/payments/payments/workflows"
)

// Services are the Temporal server's services, one process each, in the order they start.
var Services = []string{"history", "matching", "frontend", "worker"}

// Options say where the cluster's parts are and where it listens.
type Options struct {
	Root      string // the repository: bin/temporal-server and deploy/temporal are under it
	Namespace string // created if missing; default "default"
	Retention time.Duration

	// PostgreSQL, and the cluster's two databases on it (created if missing). Defaults:
	// 127.0.0.1:5432, postgres, temporal and temporal_visibility.
	DBHost, DBPort, DBUser   string
	DBName, VisibilityDBName string
	DBMaxConns               int // per service process; default 10 (and 2 for visibility)
	VisibilityDBMaxConns     int
	Shards                   int    // history shards, fixed at the cluster's creation; default 4
	FrontendPort             int    // default 7233; -1 picks free ports for every service
	UIPort                   int    // the Web UI's port; 0 runs no UI
	LogDir                   string // where each process logs (LogPrefix+"temporal-<service>.log"); empty discards the logs
	LogPrefix                string
	Keys                     *keyring.Ring // what the client it dials seals payloads with; nil: none
	CodecEndpoint            string        // the codec server the UI decodes payloads through, if any
	Out                      io.Writer     // progress; nil is silent
	PprofPort                int           // when not 0, the i-th of Services serves Go profiles on 127.0.0.1:PprofPort+i
}

// Cluster is a running cluster.
type Cluster struct {
	opts     Options
	env      []string
	mu       sync.Mutex
	procs    map[string]*supervise.Child
	ui       *supervise.Child
	client   client.Client
	hostPort string
}

// Start sets up the schema, starts the four services (and the UI if asked), and waits until
// the frontend answers with the namespace and the workflows' search attributes registered.
// If it fails, it stops what it started.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	o = o.withDefaults()
	c := &Cluster{opts: o, procs: map[string]*supervise.Child{}}
	if c.env, err = o.environment(); err != nil {
		return nil, err
	}
	c.hostPort = "127.0.0.1:" + envValue(c.env, "TEMPORAL_FRONTEND_PORT")
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	for _, bin := range []string{o.bin("server"), o.bin("sql")} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("the Temporal server is not built (%s): run 'make bin/temporal-server/server'", bin)
		}
	}
	c.step("Setting up the Temporal schema in PostgreSQL (databases %s and %s)", o.DBName, o.VisibilityDBName)
	if err := c.setupSchema(ctx); err != nil {
		return nil, err
	}
	c.step("Starting the Temporal services (%d history shards): %v", o.Shards, Services)
	for _, s := range Services {
		if err := c.StartService(s); err != nil {
			return nil, err
		}
		// One after the other: each service writes the cluster's metadata to PostgreSQL as it
		// starts, and services starting together race on it (a version mismatch ends one).
		if err := c.waitListening(ctx, s); err != nil {
			return nil, err
		}
	}
	if c.client, err = c.dial(ctx); err != nil {
		return nil, err
	}
	c.step("Registering namespace %s and the workflows' search attributes", o.Namespace)
	if err := c.register(ctx); err != nil {
		return nil, err
	}
	if o.UIPort != 0 {
		if err := c.startUI(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (o Options) withDefaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.Namespace, "default")
	def(&o.DBHost, "127.0.0.1")
	def(&o.DBPort, "5432")
	def(&o.DBUser, "postgres")
	def(&o.DBName, "temporal")
	def(&o.VisibilityDBName, "temporal_visibility")
	if o.Retention == 0 {
		o.Retention = 72 * time.Hour
	}
	if o.DBMaxConns == 0 {
		o.DBMaxConns = 10
	}
	if o.VisibilityDBMaxConns == 0 {
		o.VisibilityDBMaxConns = 2
	}
	if o.Shards == 0 {
		o.Shards = 4
	}
	if o.FrontendPort == 0 {
		o.FrontendPort = 7233
	}
	return o
}

func (o Options) bin(name string) string {
	return filepath.Join(o.Root, "bin", "temporal-server", name)
}

// environment is what every service process reads its settings from (deploy/temporal/cluster.yaml).
func (o Options) environment() ([]string, error) {
	env := append(os.Environ(),
		"TEMPORAL_DB_HOST="+o.DBHost, "TEMPORAL_DB_PORT="+o.DBPort, "TEMPORAL_DB_USER="+o.DBUser,
		"TEMPORAL_DB_NAME="+o.DBName, "TEMPORAL_VISIBILITY_DB_NAME="+o.VisibilityDBName,
		"TEMPORAL_DB_MAX_CONNS="+strconv.Itoa(o.DBMaxConns), "TEMPORAL_VISIBILITY_DB_MAX_CONNS="+strconv.Itoa(o.VisibilityDBMaxConns),
		"TEMPORAL_HISTORY_SHARDS="+strconv.Itoa(o.Shards),
		"TEMPORAL_DYNAMIC_CONFIG="+filepath.Join(o.Root, "deploy", "temporal", "dynamicconfig.yaml"),
	)
	ports := map[string]int{
		"FRONTEND": 7233, "FRONTEND_HTTP": 7243, "HISTORY": 7234, "MATCHING": 7235, "WORKER": 7239,
		"FRONTEND_MEMBERSHIP": 6933, "HISTORY_MEMBERSHIP": 6934, "MATCHING_MEMBERSHIP": 6935, "WORKER_MEMBERSHIP": 6939,
	}
	for _, name := range slices.Sorted(maps.Keys(ports)) {
		port := ports[name]
		if o.FrontendPort < 0 { // a cluster of its own for a test, beside any other
			var err error
			if port, err = supervise.FreeLowPort(); err != nil {
				return nil, err
			}
		} else if name == "FRONTEND" {
			port = o.FrontendPort
		}
		env = append(env, fmt.Sprintf("TEMPORAL_%s_PORT=%d", name, port))
	}
	return env, nil
}

// envValue is the last value of key in env.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			v = kv[len(key)+1:]
		}
	}
	return v
}

func (c *Cluster) step(format string, args ...any) {
	if c.opts.Out != nil {
		fmt.Fprintf(c.opts.Out, "==> "+format+"\n", args...)
	}
}

// setupSchema runs deploy/temporal/setup-schema.sh, as docker-compose.yml does.
func (c *Cluster) setupSchema(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "sh", filepath.Join(c.opts.Root, "deploy", "temporal", "setup-schema.sh"))
	cmd.Env = append(c.env, "SQL_TOOL="+c.opts.bin("sql"), "SCHEMA_DIR="+c.opts.bin("schema"))
	out, err := cmd.CombinedOutput()
	if c.opts.Out != nil {
		_, _ = c.opts.Out.Write(out)
	}
	if err != nil {
		return fmt.Errorf("setting up the Temporal schema: %w\n%s", err, out)
	}
	return nil
}

// StartService starts service (one of Services), or starts it again after KillService.
func (c *Cluster) StartService(service string) error {
	log := io.Discard
	if c.opts.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(c.opts.LogDir, c.opts.LogPrefix+"temporal-"+service+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close() // the child has its own descriptor
		log = f
	}
	cmd := exec.Command(c.opts.bin("server"), "--root", c.opts.Root, "--config", filepath.Join("deploy", "temporal"),
		"--env", "cluster", "--allow-no-auth", "start", "--service", service)
	cmd.Env, cmd.Stdout, cmd.Stderr = c.env, log, log
	if c.opts.PprofPort != 0 {
		cmd.Env = append(slices.Clip(c.env), fmt.Sprintf("TEMPORAL_PPROF_PORT=%d", c.opts.PprofPort+slices.Index(Services, service)))
	}
	proc, err := supervise.Start(cmd)
	if err != nil {
		return fmt.Errorf("starting the Temporal %s service: %w", service, err)
	}
	c.mu.Lock()
	c.procs[service] = proc
	c.mu.Unlock()
	return nil
}

// KillService kills service's process (SIGKILL: no handover), as a crash would.
func (c *Cluster) KillService(service string) error {
	proc := c.take(service)
	if proc == nil {
		return fmt.Errorf("the %s service is not running", service)
	}
	_ = proc.Kill()
	return nil
}

// StopService stops service's process as an operator's restart would: an interrupt, and a
// kill if it has not exited within stopWithin.
func (c *Cluster) StopService(service string) error {
	if proc := c.take(service); proc != nil {
		return proc.Stop(stopWithin)
	}
	return nil
}

// take is service's process, no longer the cluster's (nil if it has none).
func (c *Cluster) take(service string) *supervise.Child {
	c.mu.Lock()
	defer c.mu.Unlock()
	proc := c.procs[service]
	delete(c.procs, service)
	return proc
}

// Exited lists the services whose process has exited by itself (a start that failed, a crash),
// for a supervisor to start again; a service KillService or StopService stopped is not listed.
func (c *Cluster) Exited() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for s, p := range c.procs {
		if p.Err() != nil {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Pids are the service processes' ids, by service.
func (c *Cluster) Pids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := map[string]int{}
	for s, p := range c.procs {
		pids[s] = p.Pid()
	}
	return pids
}

const stopWithin = 30 * time.Second

// waitListening waits until service listens on its membership port, which it opens once it
// has started (past the cluster metadata), or exits.
func (c *Cluster) waitListening(ctx context.Context, service string) error {
	addr := "127.0.0.1:" + envValue(c.env, "TEMPORAL_"+strings.ToUpper(service)+"_MEMBERSHIP_PORT")
	c.mu.Lock()
	proc := c.procs[service]
	c.mu.Unlock()
	what := fmt.Sprintf("the Temporal %s service (on %s)", service, addr)
	if err := supervise.WaitReady(ctx, what, readyWithin, 50*time.Millisecond, proc.Err, supervise.TCPReady(addr)); err != nil {
		return fmt.Errorf("%w; see its log in %s", err, c.logWhere())
	}
	return nil
}

func (c *Cluster) logWhere() string {
	if c.opts.LogDir == "" {
		return "(no log directory was given)"
	}
	return c.opts.LogDir
}

// readyWithin is how long the frontend has to answer after its services start.
const readyWithin = 2 * time.Minute

// dial waits until the frontend answers a health check and serves the namespace's APIs.
func (c *Cluster) dial(ctx context.Context) (cl client.Client, err error) {
	err = supervise.WaitReady(ctx, "the Temporal frontend at "+c.hostPort, readyWithin, 200*time.Millisecond, c.anyExited,
		func(ctx context.Context) (err error) {
			opts := client.Options{HostPort: c.hostPort, Namespace: c.opts.Namespace, Logger: quiet{}}
			codec.Configure(&opts, c.opts.Keys)
			cl, err = client.DialContext(ctx, opts)
			return err
		})
	return cl, err
}

// anyExited says which service has exited while the cluster started, if one has.
func (c *Cluster) anyExited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, p := range c.procs {
		if err := p.Err(); err != nil {
			return fmt.Errorf("the Temporal %s service: %w; see its log in %s", s, err, c.logWhere())
		}
	}
	return nil
}

// register creates the namespace if it is missing and registers the search attributes the
// workflows set (workflows.SearchAttributeTypes), then waits until both can be used.
func (c *Cluster) register(ctx context.Context) error {
	ns, err := client.NewNamespaceClient(client.Options{HostPort: c.hostPort, Logger: quiet{}})
	if err != nil {
		return err
	}
	defer ns.Close()
	err = ns.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: c.opts.Namespace,
		WorkflowExecutionRetentionPeriod: durationpb.New(c.opts.Retention)})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("registering namespace %s: %w", c.opts.Namespace, err)
	}
	ctx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	added := false
	for {
		var n int
		n, err = c.addSearchAttributes(ctx)
		added = added || n > 0
		if err == nil && n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("registering the search attributes: %w", err)
		case <-time.After(250 * time.Millisecond): // the namespace is not in every service's cache yet
		}
	}
	if added {
		// Each service reads the namespace's search attributes from PostgreSQL every
		// namespaceCacheRefresh; until the history service has, it refuses workflows that set them.
		time.Sleep(namespaceCacheRefresh + time.Second)
	}
	return nil
}

// namespaceCacheRefresh is the server's system.namespaceCacheRefreshInterval (its default).
const namespaceCacheRefresh = 2 * time.Second

// addSearchAttributes adds the workflows' search attributes that namespace lacks, and says how
// many it asked for: none once the namespace has them all and the frontend takes a query on each.
func (c *Cluster) addSearchAttributes(ctx context.Context) (int, error) {
	op := c.client.OperatorService()
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: c.opts.Namespace})
	if err != nil {
		return 0, err
	}
	missing := map[string]enums.IndexedValueType{}
	for name, kind := range workflows.SearchAttributeTypes {
		if got, ok := have.GetCustomAttributes()[name]; !ok || got != kind {
			missing[name] = kind
		}
	}
	if len(missing) == 0 {
		var query []string
		for name := range workflows.SearchAttributeTypes {
			query = append(query, name+" IS NULL")
		}
		_, err = c.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: c.opts.Namespace,
			PageSize: 1, Query: strings.Join(query, " AND ")})
		return 0, err
	}
	_, err = op.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: c.opts.Namespace, SearchAttributes: missing})
	return len(missing), err
}

// startUI starts the Temporal Web UI (bin/temporal-ui/server) on UIPort, loopback only.
func (c *Cluster) startUI() error {
	bin := filepath.Join(c.opts.Root, "bin", "temporal-ui", "server")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the Temporal UI is not built (%s): run 'make bin/temporal-ui/server'", bin)
	}
	c.step("Starting the Temporal UI (http://localhost:%d)", c.opts.UIPort)
	cmd := exec.Command(bin, "--root", c.opts.Root, "--config", filepath.Join("deploy", "temporal", "ui"), "--env", "cluster", "start")
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.hostPort, "TEMPORAL_UI_PORT="+strconv.Itoa(c.opts.UIPort),
		"TEMPORAL_CODEC_ENDPOINT="+c.opts.CodecEndpoint)
	if c.opts.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(c.opts.LogDir, c.opts.LogPrefix+"temporal-ui.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	var err error
	c.ui, err = supervise.Start(cmd)
	return err
}

// Client is a client on the cluster's namespace. Stop does not close it.
func (c *Cluster) Client() client.Client { return c.client }

// FrontendHostPort is the frontend's gRPC address.
func (c *Cluster) FrontendHostPort() string { return c.hostPort }

// Restart stops every service and starts them again on the same state (in PostgreSQL), as an
// operator's restart of the whole cluster would.
func (c *Cluster) Restart(ctx context.Context) error {
	for _, s := range slices.Backward(Services) {
		if err := c.StopService(s); err != nil {
			return fmt.Errorf("the %s service: %w", s, err)
		}
	}
	for _, s := range Services {
		if err := c.StartService(s); err != nil {
			return err
		}
		if err := c.waitListening(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the UI and the services, frontend first (no new requests), history last.
func (c *Cluster) Stop() error {
	var errs []error
	if c.ui != nil {
		errs = append(errs, c.ui.Stop(stopWithin))
	}
	for _, s := range slices.Backward(Services) {
		if err := c.StopService(s); err != nil {
			errs = append(errs, fmt.Errorf("the %s service: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// quiet drops the SDK client's own logs while the cluster starts.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
