// Command devstack is `make run`: the whole system on one machine for a newcomer. It starts the
// Temporal dev server (Web UI on :8233, state in ./.data/), creates and migrates the database,
// runs `payments serve`, seeds two demo owners with accounts, prints how to use it, and stops
// everything on Ctrl-C.
//
// With --cluster it is `make run-cluster`, the production topology (cluster.go): a Temporal
// cluster on PostgreSQL, two `payments api` and two `payments worker` processes apart.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/devserver"
	"github.com/payments/payments/internal/ledger"
)

// Demo keys are fixed so the printed curl lines keep working across restarts. They exist only
// in the database `make run` seeds.
var demo = []struct{ owner, key string }{
	{"alice", "pk_demo_alice_0000000000000000"},
	{"bob", "pk_demo_bob_00000000000000000000"},
}

func main() {
	clustered := flag.Bool("cluster", false, "run the production topology: a Temporal cluster, two APIs and two workers")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run, name := run, "make run"
	if *clustered {
		run, name = runCluster, "make run-cluster"
	}
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, name+": "+err.Error())
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func run(ctx context.Context) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	db, err := prepareDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()

	step("Starting the Temporal dev server (gRPC localhost:7233, Web UI http://localhost:8233, state in .data/)")
	if err := os.MkdirAll(".data", 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(".data", "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	dev, err := devserver.Start(ctx, devserver.Options{Binary: filepath.Join("bin", "temporal"),
		HostPort: "localhost:7233", UIPort: "8233", DBFile: filepath.Join(".data", "temporal.db"), Log: logFile})
	if err != nil {
		return fmt.Errorf("Temporal dev server: %w (is something else on port 7233 or 8233? see .data/temporal.log)", err)
	}
	defer func() {
		step("Stopping the Temporal dev server")
		_ = dev.Stop()
	}()

	if err := buildPayments(ctx); err != nil {
		return err
	}
	step("Starting the bank simulator (%s, mild faults; state in .data/banksim.json, log in .data/banksim.log)", cfg.Bank.URL)
	stopBank, err := startBank(".data", cfg.Bank.URL, "http://localhost"+cfg.HTTPAddr+"/v1/bank/events")
	if err != nil {
		return err
	}
	defer stopBank()

	step("Starting the API and the worker (payments serve on %s)", cfg.HTTPAddr)
	serve := exec.Command(filepath.Join("bin", "payments"), "serve")
	serve.Stdout, serve.Stderr = os.Stdout, os.Stderr
	if err := serve.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	defer func() {
		step("Stopping the API and the worker")
		_ = serve.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = serve.Process.Kill()
		}
	}()
	base := "http://localhost" + cfg.HTTPAddr
	if err := waitReady(ctx, base+"/readyz", done); err != nil {
		return err
	}

	step("Seeding demo owners and accounts")
	accounts, err := seed(ctx, db)
	if err != nil {
		return err
	}
	banner(base, cfg.Bank.URL, accounts, "")

	select {
	case <-ctx.Done():
		fmt.Println()
		return nil
	case err := <-done:
		return fmt.Errorf("payments serve exited: %v", err)
	}
}

// prepareDatabase creates the database at url if it is missing, migrates it and opens it.
func prepareDatabase(ctx context.Context, url string) (*pgxpool.Pool, error) {
	step("Checking PostgreSQL (%s)", redact(url))
	if _, err := database.Create(ctx, url); err != nil {
		return nil, err
	}
	db, err := database.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	step("Migrating the database")
	if err := database.Migrate(ctx, db, os.Stdout); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// buildPayments builds bin/payments, and sets the bank's demo secret and local webhooks for the
// processes it runs.
func buildPayments(ctx context.Context) error {
	step("Building bin/payments")
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join("bin", "payments"), "./cmd/payments")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building bin/payments: %w", err)
	}
	// The bank's callbacks are signed with this secret; a real deployment sets its own.
	if os.Getenv("PAYMENTS_BANK_SECRET") == "" {
		os.Setenv("PAYMENTS_BANK_SECRET", "dev-bank-secret")
	}
	// Local receivers (http://localhost:…) are what a newcomer tries webhooks with.
	if os.Getenv("PAYMENTS_WEBHOOK_ALLOW_INSECURE") == "" {
		os.Setenv("PAYMENTS_WEBHOOK_ALLOW_INSECURE", "true")
	}
	return nil
}

// bankFaults are the simulator's mild, realistic defaults under make run (docs/bank.md): a bank
// that is a little slow, now and then refuses, and sends some callbacks twice, late, or never.
var bankFaults = []string{"--latency", "20ms", "--error-rate", "0.01", "--settle-after", "2s", "--fail-rate", "0.02",
	"--callback-drop-rate", "0.02", "--callback-dup-rate", "0.05", "--callback-delay", "1s"}

// startBank starts `payments banksim` in the background, its state and log in dir, and returns
// how to stop it.
func startBank(dir, bankURL, callbackURL string) (stop func(), err error) {
	log, err := os.OpenFile(filepath.Join(dir, "banksim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{"banksim", "--state", filepath.Join(dir, "banksim.json"), "--callback-url", callbackURL}, bankFaults...)
	bank := exec.Command(filepath.Join("bin", "payments"), args...)
	bank.Stdout, bank.Stderr = log, log
	if err := bank.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting the bank simulator: %w", err)
	}
	return func() {
		step("Stopping the bank simulator")
		_ = bank.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = bank.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = bank.Process.Kill()
		}
		log.Close()
	}, nil
}

func waitReady(ctx context.Context, url string, done <-chan error) error {
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-done:
			return fmt.Errorf("payments serve exited before it was ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// seed gives each demo owner its key and a USD account; alice's is funded once with 1,000.00.
func seed(ctx context.Context, db database.Querier) (map[string]string, error) {
	accounts := map[string]string{}
	for _, d := range demo {
		ownerID, err := auth.AddKey(ctx, db, d.owner, d.key)
		if err != nil {
			return nil, err
		}
		var id string
		err = db.QueryRow(ctx, `SELECT id FROM accounts WHERE owner_id = $1 AND name = 'Demo checking'`, ownerID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			acc, err := ledger.CreateAccount(ctx, db, ledger.NewID("acc_"), ownerID, "USD", "Demo checking", nil)
			if err != nil {
				return nil, err
			}
			id = acc.ID
		} else if err != nil {
			return nil, err
		}
		accounts[d.owner] = id
	}
	var funded bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM entries WHERE account_id = $1)`, accounts["alice"]).Scan(&funded); err != nil {
		return nil, err
	}
	if !funded {
		cmd := exec.CommandContext(ctx, filepath.Join("bin", "payments"), "deposit", "--account", accounts["alice"],
			"--amount-minor", "100000", "--idempotency-key", "demo-seed-"+accounts["alice"])
		cmd.Stderr = os.Stderr
		if out, err := cmd.Output(); err != nil {
			return nil, fmt.Errorf("funding alice: %v: %s", err, out)
		}
	}
	return accounts, nil
}

// banner prints how to use the running system; more is printed after its first lines (the
// cluster's processes, under make run-cluster).
func banner(base, bankURL string, accounts map[string]string, more string) {
	fmt.Printf(`
Payments is running. Ctrl-C stops everything.

  API          %[1]s            (contract: %[1]s/openapi.yaml)
  Temporal UI  http://localhost:8233   (workflows: http://localhost:8233/namespaces/default/workflows)
  Bank         %[6]s   (simulator: docs/bank.md; its statement: %[6]s/payments)
%[7]s
  Demo API keys
    alice  %[2]s   account %[3]s (USD, funded with 100000 minor)
    bob    %[4]s   account %[5]s (USD)

  Send 12.50 USD from alice to bob (run it twice: the second answer is a replay, the money moves once):

    curl -i -X POST %[1]s/v1/transfers \
      -H 'Authorization: Bearer %[2]s' \
      -H 'Idempotency-Key: demo-1' \
      -H 'Content-Type: application/json' \
      -d '{"from_account_id":"%[3]s","to_account_id":"%[5]s","amount_minor":1250,"currency":"USD"}'

  Pay 5.00 USD out of alice's account to an outside bank account (a payout, settled by the bank):

    curl -i -X POST %[1]s/v1/payouts \
      -H 'Authorization: Bearer %[2]s' \
      -H 'Idempotency-Key: payout-1' \
      -H 'Content-Type: application/json' \
      -d '{"account_id":"%[3]s","amount_minor":500,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}'

  Read alice's events (every change, oldest first; resume with after=<next_cursor>):

    curl -s '%[1]s/v1/events?limit=5' -H 'Authorization: Bearer %[2]s'

`, base, demo[0].key, accounts["alice"], demo[1].key, accounts["bob"], bankURL, more)
}

// redact shows where a database URL points without its password.
func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "DATABASE_URL"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}
