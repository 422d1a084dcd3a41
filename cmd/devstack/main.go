// Command devstack is `make run`: the whole system on one machine for a newcomer. It starts the
// Temporal dev server (Web UI on :8233, state in ./.data/), creates and migrates the database,
// runs `payments serve`, seeds two demo owners with accounts, prints how to use it, and stops
// everything on Ctrl-C. Everything it starts listens on 127.0.0.1 only.
//
// With --cluster it is `make run-cluster`, the production topology (cluster.go): a Temporal
// cluster on PostgreSQL, two `payments api` and two `payments worker` processes apart.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/devserver"
	"github.com/payments/payments/rig/supervise"
)

// Demo keys are fixed so the printed curl lines keep working across restarts. They exist only
// in the database `make run` seeds.
var demo = []struct{ owner, key string }{
	{"alice", "pk_demo_alice_0000000000000000"},
	{"bob", "pk_demo_bob_00000000000000000000"},
}

// stack says where make run puts things: makeRun, or a test's own (main_test.go).
type stack struct {
	data     string // state and logs
	temporal string // the Temporal CLI
	payments string // the binary it builds and runs
	// The ports of the API, the dev server's gRPC and its Web UI, all on config.Loopback (the
	// bank's is PAYMENTS_BANK_URL's).
	apiPort, temporalPort, uiPort string
	ready                         func() // called once everything answers (tests); nil: nothing
}

var makeRun = stack{data: ".data", temporal: filepath.Join("bin", "temporal"), payments: filepath.Join("bin", "payments"),
	apiPort: config.HTTPPort, temporalPort: "7233", uiPort: "8233"}

func main() {
	clustered := flag.Bool("cluster", false, "run the production topology: a Temporal cluster, two APIs and two workers")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run, name := makeRun.run, "make run"
	if *clustered {
		run, name = runCluster, "make run-cluster"
	}
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, name+": "+err.Error())
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// loopback is port on config.Loopback.
func loopback(port string) string { return net.JoinHostPort(config.Loopback, port) }

// localURL is the http URL, from this machine, of a listen address (":8080" is localhost's).
func localURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// setDefault sets the environment variable name, which the processes started read, unless it is
// set already (the user's own choice).
func setDefault(name, value string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	os.Setenv(name, value)
	return value
}

func (s stack) run(ctx context.Context) error {
	// Listen on loopback only, unless told otherwise: the demo keys are well known and webhooks
	// may aim at local services (PAYMENTS_WEBHOOK_ALLOW_INSECURE).
	apiAddr := setDefault("PAYMENTS_HTTP_ADDR", loopback(s.apiPort))
	setDefault("PAYMENTS_METRICS_ADDR", loopback(config.MetricsPort))
	codecAddr, err := codecSettings(s.data, s.uiPort)
	if err != nil {
		return err
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	db, err := prepareDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()

	temporalAddr := loopback(s.temporalPort)
	ui := localURL(loopback(s.uiPort))
	step("Starting the Temporal dev server (gRPC %s, Web UI %s, state in %s/)", temporalAddr, ui, s.data)
	logFile, err := os.OpenFile(filepath.Join(s.data, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	dev, err := devserver.Start(ctx, devserver.Options{Binary: s.temporal,
		HostPort: temporalAddr, UIPort: s.uiPort, DBFile: filepath.Join(s.data, "temporal.db"), Log: logFile,
		Keys: cfg.Temporal.Keys, CodecEndpoint: localURL(codecAddr)})
	if err != nil {
		return fmt.Errorf("Temporal dev server: %w (is something else on port %s or %s? see %s)", err, s.temporalPort, s.uiPort,
			filepath.Join(s.data, "temporal.log"))
	}
	defer func() {
		step("Stopping the Temporal dev server")
		_ = dev.Stop()
	}()
	os.Setenv("TEMPORAL_ADDRESS", temporalAddr) // the dev server just started, whatever the shell says

	if err := buildPayments(ctx, s.payments); err != nil {
		return err
	}
	base := localURL(apiAddr)
	step("Starting the bank simulator (%s, mild faults; state in %s, log in %s)", cfg.Bank.URL,
		filepath.Join(s.data, "banksim.json"), filepath.Join(s.data, "banksim.log"))
	stopBank, err := startBank(s.payments, s.data, base+"/v1/bank/events")
	if err != nil {
		return err
	}
	defer stopBank()

	stopCodec, err := startCodecServer(s.payments, s.data, codecAddr)
	if err != nil {
		return err
	}
	defer stopCodec()

	step("Starting the API and the worker (payments serve on %s)", apiAddr)
	cmd := exec.Command(s.payments, "serve")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	serve, err := supervise.Start(cmd)
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping the API and the worker")
		_ = serve.Stop(stopWithin)
	}()
	if err := waitReady(ctx, "payments serve", base, serve.Err); err != nil {
		return err
	}

	step("Seeding demo owners and accounts")
	accounts, err := seed(ctx, db, s.payments)
	if err != nil {
		return err
	}
	if err := writeDemoEnv(s.data, base, cfg.Bank.URL, accounts); err != nil {
		return err
	}
	banner(base, ui, cfg.Bank.URL, filepath.Join(s.data, demoEnv), accounts, "")
	if s.ready != nil {
		s.ready()
	}

	select {
	case <-ctx.Done():
		fmt.Println()
		return nil
	case <-serve.Done():
		return fmt.Errorf("payments serve exited: %v", serve.Wait())
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

// buildPayments builds the payments binary at bin, and sets the bank's demo secret and local
// webhooks for the processes it runs.
func buildPayments(ctx context.Context, bin string) error {
	step("Building %s", bin)
	if err := supervise.BuildPayments(ctx, bin); err != nil {
		return err
	}
	// The bank's callbacks are signed with this secret; a real deployment sets its own.
	if os.Getenv("PAYMENTS_BANK_SECRET") == "" {
		os.Setenv("PAYMENTS_BANK_SECRET", "dev-bank-secret")
	}
	// Payouts of 1,000.00 or more wait for a second key's approval (contract §9).
	if os.Getenv("PAYMENTS_APPROVAL_THRESHOLD_MINOR") == "" {
		os.Setenv("PAYMENTS_APPROVAL_THRESHOLD_MINOR", strconv.Itoa(approvalThreshold))
	}
	// Local receivers (http://localhost:…) are what a newcomer tries webhooks with.
	if os.Getenv("PAYMENTS_WEBHOOK_ALLOW_INSECURE") == "" {
		os.Setenv("PAYMENTS_WEBHOOK_ALLOW_INSECURE", "true")
	}
	return nil
}

// approvalThreshold is make run's PAYMENTS_APPROVAL_THRESHOLD_MINOR: what alice is funded with
// covers a payout that waits for approval.
const approvalThreshold = 100_000

// bankFaults are the simulator's mild, realistic defaults under make run (docs/bank.md): a bank
// that is a little slow, now and then refuses, and sends some callbacks twice, late, or never.
var bankFaults = []string{"--latency", "20ms", "--error-rate", "0.01", "--settle-after", "2s", "--fail-rate", "0.02",
	"--callback-drop-rate", "0.02", "--callback-dup-rate", "0.05", "--callback-delay", "1s"}

// startBank starts `payments banksim` in the background, on the address of PAYMENTS_BANK_URL (a
// loopback one: the simulator listens on nothing else), its state and log in dir, and returns
// how to stop it.
func startBank(bin, dir, callbackURL string) (stop func(), err error) {
	args := append([]string{"banksim", "--state", filepath.Join(dir, "banksim.json"), "--callback-url", callbackURL}, bankFaults...)
	return startService("bank simulator", filepath.Join(dir, "banksim.log"), bin, 10*time.Second, args...)
}

// startService starts bin with args as a child logging to log (startLogged), and returns how to
// stop it: saying so, then giving it grace to stop after an interrupt.
func startService(what, log, bin string, grace time.Duration, args ...string) (stop func(), err error) {
	child, err := startLogged(log, bin, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("starting the %s: %w", what, err)
	}
	return func() {
		step("Stopping the %s", what)
		_ = child.Stop(grace)
	}, nil
}

// stopWithin is how long a payments process has to stop after an interrupt before it is killed.
const stopWithin = 20 * time.Second

// startLogged starts bin with args, env added to its environment and its output appended to the
// file log, as a child that dies with this process.
func startLogged(log, bin string, env []string, args ...string) (*supervise.Child, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	return supervise.Start(cmd)
}

// waitReady waits until the API at base is ready, or gone says what of the stack has exited.
func waitReady(ctx context.Context, what, base string, gone func() error) error {
	return supervise.WaitReady(ctx, what, 0, 200*time.Millisecond, gone, supervise.HTTPReady(base+"/readyz"))
}

// seed gives each demo owner its key and a USD account; alice's is funded once with 1,000.00.
func seed(ctx context.Context, db database.Querier, bin string) (map[string]string, error) {
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
		cmd := exec.CommandContext(ctx, bin, "deposit", "--account", accounts["alice"],
			"--amount-minor", strconv.Itoa(aliceFunds), "--idempotency-key", "demo-seed-"+accounts["alice"])
		cmd.Stderr = os.Stderr
		if out, err := cmd.Output(); err != nil {
			return nil, fmt.Errorf("funding alice: %v: %s", err, out)
		}
	}
	return accounts, nil
}

// aliceFunds is what alice's demo account is funded with: 10,000.00 USD.
const aliceFunds = 1_000_000

// demoEnv is the file, in the state directory, of the shell variables the README's examples use.
const demoEnv = "demo.env"

// writeDemoEnv writes the demo keys and accounts as shell variables into dir/demo.env, so that
// the README's examples paste as written after `. .data/demo.env`.
func writeDemoEnv(dir, base, bankURL string, accounts map[string]string) error {
	content := fmt.Sprintf(`# Written by make run (cmd/devstack): the demo keys and accounts, for the README's examples.
API=%s
BANK=%s
KEY=%s
BOB=%s
ALICE_ACC=%s
BOB_ACC=%s
`, base, bankURL, demo[0].key, demo[1].key, accounts["alice"], accounts["bob"])
	return os.WriteFile(filepath.Join(dir, demoEnv), []byte(content), 0o644)
}

// banner prints how to use the running system; more is printed after its first lines (the
// cluster's processes, under make run-cluster).
func banner(base, ui, bankURL, envFile string, accounts map[string]string, more string) {
	fmt.Printf(`
Payments is running. Ctrl-C stops everything.

  API          %[1]s            (contract: %[1]s/openapi.yaml)
  Temporal UI  %[8]s   (workflows: %[8]s/namespaces/default/workflows)
  Codec        %[10]s   (payloads are encrypted; the UI decodes them here: contract §10)
  Bank         %[6]s   (simulator: docs/bank.md; its statement: %[6]s/payments)
%[7]s
  Demo API keys
    alice  %[2]s   account %[3]s (USD, funded with 1000000 minor)
    bob    %[4]s   account %[5]s (USD)
  In a shell, . %[9]s sets KEY, BOB, ALICE_ACC, BOB_ACC, API and BANK, which the README's examples use.

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

`, base, demo[0].key, accounts["alice"], demo[1].key, accounts["bob"], bankURL, more, ui, envFile, localURL(os.Getenv("PAYMENTS_CODEC_ADDR")))
}

// redact shows where a database URL points without its password.
func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "DATABASE_URL"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// codecSettings sets what the processes of the stack seal their Temporal payloads with, unless
// the user's environment says: the keys kept under dir (codecKeys), the codec server's address,
// which it returns, and the origins of the Web UI on uiPort, the only ones it answers browsers from.
func codecSettings(dir, uiPort string) (addr string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if os.Getenv("PAYMENTS_CODEC_KEYS") == "" {
		keys, err := codecKeys(dir)
		if err != nil {
			return "", err
		}
		os.Setenv("PAYMENTS_CODEC_KEYS", keys)
	}
	setDefault("PAYMENTS_CODEC_UI_ORIGINS", localURL(loopback(uiPort))+",http://localhost:"+uiPort)
	return setDefault("PAYMENTS_CODEC_ADDR", config.DefaultCodecAddr), nil
}

// startCodecServer starts `payments codec-server` on addr, logging under dir.
func startCodecServer(bin, dir, addr string) (stop func(), err error) {
	log := filepath.Join(dir, "codec.log")
	step("Starting the codec server (%s: the Web UI decodes the encrypted payloads through it; log in %s)", addr, log)
	return startService("codec server", log, bin, 5*time.Second, "codec-server")
}

// codecKeysFile keeps the payload codec's key of `make run` (PAYMENTS_CODEC_KEYS), made once:
// the histories in the dev server's state are sealed with it, and read with it after a restart.
const codecKeysFile = "codec-keys"

// codecKeys returns the keys kept under dir, making a key there the first time.
func codecKeys(dir string) (string, error) {
	file := filepath.Join(dir, codecKeysFile)
	b, err := os.ReadFile(file)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	keys := keyring.Generate("dev-" + time.Now().UTC().Format("20060102"))
	step("Generating the payload codec's key into %s (kept: the dev server's histories are sealed with it)", file)
	return keys, os.WriteFile(file, []byte(keys+"\n"), 0o600)
}
