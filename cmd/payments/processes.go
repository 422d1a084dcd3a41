package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/transfers"
	"github.com/payments/payments/worker"
)

// deps are what every long-running command opens.
type deps struct {
	cfg      config.Config
	log      *slog.Logger
	db       *pgxpool.Pool
	temporal client.Client
}

func open(ctx context.Context, lazyTemporal bool) (*deps, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, usagef("%v", err)
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
	return &deps{cfg: cfg, log: log, db: db, temporal: c}, nil
}

func (d *deps) close() {
	d.temporal.Close()
	d.db.Close()
}

func (d *deps) transfers(eager bool) *transfers.Service {
	return &transfers.Service{
		Ledger: &ledger.Ledger{DB: d.db}, Temporal: d.temporal,
		SyncWait: d.cfg.SyncWait, TTL: d.cfg.IdempotencyTTL, RetryFor: d.cfg.RetryFor, Eager: eager,
	}
}

func runAPI(ctx context.Context, args []string, _ io.Writer) error {
	if err := parse(newFlags("api"), args); err != nil {
		return err
	}
	d, err := open(ctx, true)
	if err != nil {
		return err
	}
	defer d.close()
	return d.serveHTTP(ctx, false)
}

func runWorker(ctx context.Context, args []string, _ io.Writer) error {
	if err := parse(newFlags("worker"), args); err != nil {
		return err
	}
	d, err := open(ctx, false)
	if err != nil {
		return err
	}
	defer d.close()
	return d.runWorker(ctx)
}

// runServe runs API and worker on one Temporal client, which lets the API start workflows
// eagerly: the worker here runs the first workflow task without a round trip through the server.
func runServe(ctx context.Context, args []string, _ io.Writer) error {
	if err := parse(newFlags("serve"), args); err != nil {
		return err
	}
	d, err := open(ctx, false)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- d.runWorker(ctx) }()
	go func() { errs <- d.serveHTTP(ctx, true) }()
	err = <-errs
	cancel()
	if err2 := <-errs; err == nil {
		err = err2
	}
	return err
}

func (d *deps) runWorker(ctx context.Context) error {
	if err := worker.CheckSearchAttributes(ctx, d.temporal, d.cfg.Temporal.Namespace); err != nil {
		return err
	}
	w := worker.New(d.temporal, &activities.Activities{Ledger: &ledger.Ledger{DB: d.db}})
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := worker.EnsureCleanupSchedule(ctx, d.temporal); err != nil {
		w.Stop()
		return fmt.Errorf("worker: creating the idempotency cleanup schedule: %w", err)
	}
	d.log.Info("worker started", "task_queue", "payments-transfers", "temporal", d.cfg.Temporal.Address)
	<-ctx.Done()
	w.Stop()
	return nil
}

func (d *deps) serveHTTP(ctx context.Context, eager bool) error {
	srv := &api.Server{DB: d.db, Ledger: &ledger.Ledger{DB: d.db}, Transfers: d.transfers(eager),
		Temporal: d.temporal, TTL: d.cfg.IdempotencyTTL, Log: d.log}
	hs := &http.Server{Addr: d.cfg.HTTPAddr, Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 1)
	go func() { errs <- hs.ListenAndServe() }()
	d.log.Info("api listening", "addr", d.cfg.HTTPAddr)
	select {
	case err := <-errs:
		return fmt.Errorf("api: %w", err)
	case <-ctx.Done():
	}
	// Let in-flight requests finish; their workflows carry on regardless.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), d.cfg.SyncWait+5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
