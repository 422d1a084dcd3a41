// Package devserver starts the Temporal CLI's dev server tuned the same way for `make run` and
// for the tests (docs/adr/0002-tuned-dev-server.md).
package devserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/rig/supervise"
	"github.com/payments/payments/workflows"
)

// TunedArgs are the dynamic-config values the dev server runs with. The dev server has one
// history shard that by default reads its transfer queue 20 times a second, so every task
// dispatch waits ~50 ms; and with four task-queue partitions about one dispatch in 30 stalls
// for 2 s on partition forwarding. One partition and a fast poll remove both. SQLite in WAL mode
// with synchronous=NORMAL commits without waiting on the disk for each transaction: the server
// was waiting on fsync, not on its CPU, and new transfers went from 53/s to 90/s (ADR 0002). A
// crash of the process loses nothing; a crash of the machine may lose the last transactions.
var TunedArgs = []string{
	"--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
	"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
	"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
	"--dynamic-config-value", "system.enableEagerWorkflowStart=true",
	"--dynamic-config-value", "history.maxInFlightUpdates=" + MaxInFlightUpdates,
	"--sqlite-pragma", "journal_mode=wal",
	"--sqlite-pragma", "synchronous=normal",
}

// MaxInFlightUpdates is how many Updates one run admits at once (Temporal's default is 10), as in
// deploy/temporal/dynamicconfig.yaml. Every duplicate of a request to `payments api` asks the run
// by an Update (Update-With-Start); past the limit Temporal refuses it, the SDK retries with a
// backoff of up to 10 s, and fifty duplicates of one transfer outwaited PAYMENTS_SYNC_WAIT.
const MaxInFlightUpdates = "200"

// Options say where the server listens and keeps its state.
type Options struct {
	Binary   string // path to the temporal CLI, e.g. ./bin/temporal
	HostPort string // gRPC address; empty picks a free port
	UIPort   string // empty means no Web UI
	DBFile   string // SQLite file for state that survives restarts; empty keeps it in memory
	Log      io.Writer
	Keys     *keyring.Ring // what the client it dials seals payloads with (PAYMENTS_CODEC_KEYS); nil: none
	// CodecEndpoint is the codec server the Web UI decodes payloads through (payments
	// codec-server), if any.
	CodecEndpoint string
}

// Server is a running dev server, a child of this process that dies with it (see supervise.Start).
type Server struct {
	child    *supervise.Child
	client   client.Client
	hostPort string
}

// Start starts the dev server and waits until it answers, with the workflows' search attributes
// registered on its default namespace. If it does not answer, Start kills it.
func Start(ctx context.Context, o Options) (*Server, error) {
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("the Temporal CLI is not at %s: run 'make bin/temporal' to build it", o.Binary)
	}
	if o.DBFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.DBFile), 0o755); err != nil {
			return nil, err
		}
	}
	hostPort := o.HostPort
	if hostPort == "" {
		var err error
		if hostPort, err = supervise.FreeHostPort(); err != nil {
			return nil, err
		}
	} else if l, err := net.Listen("tcp", hostPort); err != nil {
		// Dialing would find the server already there, and Start would answer with it.
		return nil, fmt.Errorf("cannot listen on %s: %w", hostPort, err)
	} else {
		_ = l.Close()
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, fmt.Errorf("invalid HostPort: %w", err)
	}
	cmd := exec.Command(o.Binary, serverArgs(o, host, port)...)
	cmd.Stdout, cmd.Stderr = o.Log, o.Log
	if o.Log == nil {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}
	proc, err := supervise.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", o.Binary, err)
	}
	opts := client.Options{HostPort: hostPort, Namespace: namespace, Logger: quiet{}}
	codec.Configure(&opts, o.Keys)
	c, err := dial(ctx, proc, opts)
	if err != nil {
		_ = proc.Kill()
		return nil, err
	}
	return &Server{child: proc, client: c, hostPort: hostPort}, nil
}

const namespace = "default"

// serverArgs are the dev server's command-line arguments: those go.temporal.io/sdk/testsuite's
// StartDevServer passes plus TunedArgs.
func serverArgs(o Options, host, port string) []string {
	args := []string{
		"server", "start-dev",
		"--ip", host, "--port", port,
		"--namespace", namespace,
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false",
		"--log-level", "error",
	}
	if o.UIPort == "" {
		args = append(args, "--headless")
	}
	if o.DBFile != "" {
		args = append(args, "--db-filename", o.DBFile)
	}
	if o.UIPort != "" {
		args = append(args, "--ui-port", o.UIPort)
	}
	if o.UIPort != "" && o.CodecEndpoint != "" {
		args = append(args, "--ui-codec-endpoint", o.CodecEndpoint)
	}
	names := make([]string, 0, len(workflows.SearchAttributeTypes))
	for name := range workflows.SearchAttributeTypes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		args = append(args, "--search-attribute", name+"="+workflows.SearchAttributeTypes[name].String())
	}
	return append(args, TunedArgs...)
}

// readyWithin is how long the server has to answer, as in the SDK's StartDevServer.
const readyWithin = time.Minute

// dial dials the server until it answers, it exits, ctx ends or readyWithin passes.
func dial(ctx context.Context, proc *supervise.Child, opts client.Options) (c client.Client, err error) {
	err = supervise.WaitReady(ctx, "the dev server", readyWithin, 100*time.Millisecond, proc.Err, func(ctx context.Context) (err error) {
		c, err = client.DialContext(ctx, opts)
		return err
	})
	return c, err
}

// Client is a client connected to the server's default namespace. Stop does not close it: it
// reconnects to a server started again on the same address.
func (s *Server) Client() client.Client { return s.client }

// FrontendHostPort is the server's gRPC address.
func (s *Server) FrontendHostPort() string { return s.hostPort }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.child.Pid() }

// stopWithin is how long Stop waits after an interrupt before it kills the server.
const stopWithin = 30 * time.Second

// Stop interrupts the server and waits for it to exit; if it has not within stopWithin, Stop
// kills it. It returns how the process ended (nil after a clean shutdown).
func (s *Server) Stop() error {
	if err := s.child.Stop(stopWithin); err != nil {
		return fmt.Errorf("the dev server %w", err)
	}
	return s.child.Wait()
}

// quiet drops the SDK client's own logs while the server starts.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
