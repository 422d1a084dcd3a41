// Package devserver starts the Temporal CLI's dev server tuned the same way for `make run` and
// for the tests (docs/adr/0002-tuned-dev-server.md).
package devserver

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

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
	"--sqlite-pragma", "journal_mode=wal",
	"--sqlite-pragma", "synchronous=normal",
}

// Options say where the server listens and keeps its state.
type Options struct {
	Binary   string // path to the temporal CLI, e.g. ./bin/temporal
	HostPort string // gRPC address; empty picks a free port
	UIPort   string // empty means no Web UI
	DBFile   string // SQLite file for state that survives restarts; empty keeps it in memory
	Log      io.Writer
}

// Start starts the dev server and waits until it answers.
func Start(ctx context.Context, o Options) (*testsuite.DevServer, error) {
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("the Temporal CLI is not at %s: run 'make bin/temporal' to build it", o.Binary)
	}
	if o.DBFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.DBFile), 0o755); err != nil {
			return nil, err
		}
	}
	var attrs []temporal.SearchAttributeUpdate
	for name, t := range workflows.SearchAttributeTypes {
		attrs = append(attrs, keyFor(name, t))
	}
	return testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:     o.Binary,
		ClientOptions:    &client.Options{HostPort: o.HostPort, Logger: quiet{}},
		DBFilename:       o.DBFile,
		EnableUI:         o.UIPort != "",
		UIPort:           o.UIPort,
		LogLevel:         "error",
		SearchAttributes: temporal.NewSearchAttributes(attrs...),
		ExtraArgs:        TunedArgs,
		Stdout:           o.Log,
		Stderr:           o.Log,
	})
}

func keyFor(name string, t enums.IndexedValueType) temporal.SearchAttributeUpdate {
	if t == enums.INDEXED_VALUE_TYPE_INT {
		return temporal.NewSearchAttributeKeyInt64(name).ValueSet(0)
	}
	return temporal.NewSearchAttributeKeyKeyword(name).ValueSet("")
}

// quiet drops the SDK client's own logs while the server starts.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
