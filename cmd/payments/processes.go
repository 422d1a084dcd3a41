package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"

	"github.com/payments/payments/api"
	"github.com/payments/payments/app"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/worker"
	"github.com/payments/payments/workflows"
)

// deps are what every long-running command opens.
type deps struct {
	cfg      config.Config
	log      *slog.Logger
	db       *pgxpool.Pool
	temporal client.Client
	dc       converter.DataConverter // temporal's: the payload codec's when PAYMENTS_CODEC_KEYS is set
}

// errNoKeys refuses to run without the keys that seal what the process writes (contract §10):
// customers' data in Temporal and webhook secrets in PostgreSQL would otherwise be plaintext.
var errNoKeys = usagef("PAYMENTS_CODEC_KEYS is not set: what this process writes to Temporal and the secrets it keeps " +
	"are sealed with these keys (docs/security.md); make one with: export PAYMENTS_CODEC_KEYS=k1=$(head -c 32 /dev/urandom | base64)")

func open(ctx context.Context, lazyTemporal bool) (*deps, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, usagef("%v", err)
	}
	if cfg.Temporal.Keys == nil {
		return nil, errNoKeys
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	db, err := database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	opts, err := cfg.Temporal.ClientOptions()
	if err != nil {
		db.Close()
		return nil, usagef("%v", err)
	}
	opts.Logger = tlog.NewStructuredLogger(log.With("component", "temporal"))
	opts.MetricsHandler = sdkMetrics()
	var c client.Client
	if lazyTemporal {
		// The API starts without Temporal and answers 503 until it is reachable.
		c, err = client.NewLazyClient(opts)
	} else {
		c, err = client.DialContext(ctx, opts)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("Temporal is not reachable at %s (namespace %s): %v; start it (make run does) or set TEMPORAL_ADDRESS",
			cfg.Temporal.Address, cfg.Temporal.Namespace, err)
	}
	return &deps{cfg: cfg, log: log, db: db, temporal: c, dc: opts.DataConverter}, nil
}

// sdkMetrics reports the Temporal SDK's own metrics (prefixed temporal_) in the process's
// Prometheus registry. One handler per process: the registry takes each metric once.
var sdkMetrics = sync.OnceValue(func() client.MetricsHandler {
	reporter := tallyprom.NewReporter(tallyprom.Options{Registerer: prometheus.DefaultRegisterer})
	scope, _ := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, time.Second)
	return sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope))
})

func (d *deps) close() {
	d.temporal.Close()
	d.db.Close()
}

// app assembles the parts on the process's database and client; listener is for `serve` only.
func (d *deps) app(listener *operation.Listener) *app.App {
	return app.New(d.db, d.temporal, app.Settings{SyncWait: d.cfg.SyncWait, TTL: d.cfg.IdempotencyTTL, RetryFor: d.cfg.RetryFor,
		Bank: d.cfg.Bank, Webhooks: d.cfg.Webhooks, Approvals: d.cfg.Approvals, Converter: d.dc, Keys: d.cfg.Temporal.Keys,
		RateLimit: d.cfg.RateLimit}, d.log, listener)
}

// openFor parses the args of process command name and opens its deps: one serving the API
// (bankSecret) needs the bank's secret; a lazy one starts without Temporal.
func openFor(ctx context.Context, name string, args []string, bankSecret, lazy bool) (*deps, error) {
	if err := parse(newFlags(name), args); err != nil {
		return nil, err
	}
	if bankSecret {
		if err := needBankSecret(); err != nil {
			return nil, err
		}
	}
	return open(ctx, lazy)
}

func runAPI(ctx context.Context, args []string, _ io.Writer) error {
	d, err := openFor(ctx, "api", args, true, true)
	if err != nil {
		return err
	}
	defer d.close()
	return d.serveHTTP(ctx, d.app(nil))
}

func runWorker(ctx context.Context, args []string, _ io.Writer) error {
	d, err := openFor(ctx, "worker", args, false, false)
	if err != nil {
		return err
	}
	defer d.close()
	return d.runWorker(ctx, d.app(nil), true)
}

// needBankSecret refuses to serve the API without the secret that verifies the bank's callbacks:
// without it, anyone could tell the processor that a payout was paid.
func needBankSecret() error {
	if os.Getenv("PAYMENTS_BANK_SECRET") == "" {
		return usagef("PAYMENTS_BANK_SECRET is required: it verifies the bank's callbacks (make run uses dev-bank-secret)")
	}
	return nil
}

// runServe runs API and worker on one Temporal client, which lets the API start workflows
// eagerly: the worker here runs the first workflow task without a round trip through the server.
func runServe(ctx context.Context, args []string, _ io.Writer) error {
	d, err := openFor(ctx, "serve", args, true, false)
	if err != nil {
		return err
	}
	defer d.close()
	a := d.app(operation.NewListener())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- d.runWorker(ctx, a, false) }()
	go func() { errs <- d.serveHTTP(ctx, a) }()
	err = <-errs
	cancel()
	if err2 := <-errs; err == nil {
		err = err2
	}
	return err
}

// runWorker runs the worker until ctx ends, serving /metrics on its own port when asked (a
// process without the HTTP API).
func (d *deps) runWorker(ctx context.Context, a *app.App, metrics bool) error {
	if err := worker.CheckSearchAttributes(ctx, d.temporal, d.cfg.Temporal.Namespace); err != nil {
		return err
	}
	if metrics {
		d.serveMetrics(ctx)
	}
	w := a.Worker()
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := worker.EnsureSchedules(ctx, d.temporal); err != nil {
		w.Stop()
		return fmt.Errorf("worker: %w", err)
	}
	d.log.Info("worker started", "task_queue", workflows.TaskQueue, "temporal", d.cfg.Temporal.Address)
	<-ctx.Done()
	w.Stop()
	return nil
}

// serveMetrics serves /metrics and /healthz for a process without the HTTP API, until ctx ends.
func (d *deps) serveMetrics(ctx context.Context) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"status":"ok"}`)) })
	hs := &http.Server{Addr: d.cfg.MetricsAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("metrics listener", "addr", d.cfg.MetricsAddr, "err", err)
		}
	}()
	d.log.Info("metrics listening", "addr", d.cfg.MetricsAddr)
	go func() { <-ctx.Done(); _ = hs.Close() }()
}

func (d *deps) serveHTTP(ctx context.Context, a *app.App) error {
	ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	d.log.Info("api listening", "addr", ln.Addr().String())
	// Requests in flight may take PAYMENTS_SYNC_WAIT; their workflows carry on regardless.
	return serveUntil(ctx, "api", api.NewHTTPServer(d.cfg.HTTPAddr, a.Server().Handler(), d.cfg.SyncWait), ln, d.cfg.SyncWait+5*time.Second)
}

// serveUntil serves hs on ln until ctx ends, then lets the requests in flight finish for up to
// grace. An error serving is returned named after what serves.
func serveUntil(ctx context.Context, what string, hs *http.Server, ln net.Listener, grace time.Duration) error {
	errs := make(chan error, 1)
	go func() { errs <- hs.Serve(ln) }()
	select {
	case err := <-errs:
		return fmt.Errorf("%s: %w", what, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
