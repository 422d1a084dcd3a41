// Command payments is the one binary of the payment processor: the HTTP API, the Temporal
// worker, and the operator commands (README, "Commands").
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// usageError is a bad flag or argument: one line on stderr and exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

type command struct {
	name string
	sub  string // the word a command line needs after name (keys create), if any
	help string
	run  func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands = []command{
	{"api", "", "serve the HTTP API", runAPI},
	{"worker", "", "run the Temporal worker", runWorker},
	{"serve", "", "run the HTTP API and the worker in one process", runServe},
	{"migrate", "", "create the database if absent and apply migrations", runMigrate},
	{"keys", "create", "keys create --owner NAME [--scope S]… | keys list --owner NAME | keys revoke KEY_ID: issue, list and revoke API keys", runKeys},
	{"accounts", "create", "accounts create --owner NAME --currency CUR [--name TEXT]: open an account", runAccounts},
	{"payouts", "pending", "payouts pending: list the payouts waiting for approval, oldest first", runPayouts},
	{"deposit", "", "deposit --account ID --amount-minor N [--idempotency-key K]: fund an account", runDeposit},
	{"reconcile", "", "check every ledger invariant; exit 1 when any is broken", runReconcile},
	{"bench", "", "bench [--api URL] [--clients N] [--duration D] [--json FILE]: measure what a transfer costs", runBench},
	{"rerun", "failed", "rerun failed [--since D] [--dry-run]: run failed, terminated or timed-out transfers, payouts, payins and webhook deliveries again", runRerun},
	{"codec-server", "", "serve Temporal's remote codec protocol (PAYMENTS_CODEC_KEYS) for the Web UI and the CLI", runCodecServer},
	{"replay", "history", "replay history FILE.json…: check that histories replay against this build", runReplay},
	{"banksim", "", "run the bank simulator (docs/bank.md)", runBanksim},
	{"chaos", "", "chaos [--seeds 1,2,3] [--ops N] [--clients N] [--keep]: seeded chaos runs on the production topology (docs/reliability.md)", runChaos},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout)
	stop()
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "payments: "+usage.msg)
		os.Exit(2)
	case errors.Is(err, errExitOne):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "payments: "+err.Error())
		os.Exit(1)
	}
}

// errExitOne ends the process with status 1 after the command printed its own report.
var errExitOne = errors.New("exit 1")

func dispatch(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, "usage: payments <command> [flags]")
		for _, c := range commands {
			fmt.Fprintf(stdout, "  %-9s %s\n", c.name, c.help)
		}
		if len(args) == 0 {
			return usagef("a command is required; run 'payments help'")
		}
		return nil
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		if c.sub != "" && len(args) > 1 && isHelp(args[1]) { // keys --help: the help of keys create
			args = []string{c.name, c.sub, args[1]}
		}
		err := c.run(ctx, args[1:], stdout)
		var help helpRequested
		if errors.As(err, &help) {
			printHelp(stdout, c, help.fs)
			return nil
		}
		return err
	}
	return usagef("unknown command %q; run 'payments help'", args[0])
}
