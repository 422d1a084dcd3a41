package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/payments/payments/banksim"
)

// runBanksim runs the bank simulator (docs/bank.md) until ctx ends. Every flag can also be set as
// PAYMENTS_BANKSIM_<FLAG>; the command line wins.
func runBanksim(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("banksim")
	defaultAddr, err := bankAddr()
	if err != nil {
		return usagef("banksim: %v", err)
	}
	addr := fs.String("addr", defaultAddr, "listen address, loopback only; by default the host:port of PAYMENTS_BANK_URL")
	callbackURL := fs.String("callback-url", "http://localhost:8080/v1/bank/events", "where events are POSTed, loopback only")
	stateFile := fs.String("state", "", "JSON state file, kept across restarts (default: in memory)")
	seed := fs.Uint64("seed", 1, "seed of every random choice")
	faults := banksim.DefaultFaults()
	faults.RegisterFlags(fs)
	if wantsHelp(args) {
		fmt.Fprintln(stdout, "usage: payments banksim [flags]  (docs/bank.md; PAYMENTS_BANK_SECRET signs the callbacks)")
		fmt.Fprintln(stdout, "every flag may be set as PAYMENTS_BANKSIM_<FLAG> in the environment, e.g. PAYMENTS_BANKSIM_ERROR_RATE=0.01")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	}
	if err := flagsFromEnv(fs); err != nil {
		return err
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := faults.Validate(); err != nil {
		return usagef("banksim: %v", err)
	}
	secret := os.Getenv("PAYMENTS_BANK_SECRET")
	if secret == "" {
		return usagef("banksim: PAYMENTS_BANK_SECRET is required: it signs the callbacks")
	}
	if _, err := banksim.LoopbackAddr(*addr); err != nil {
		return usagef("banksim: --addr: %v", err)
	}
	if err := banksim.CheckCallbackURL(*callbackURL); err != nil {
		return usagef("banksim: --callback-url: %v", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "banksim")
	return banksim.Run(ctx, *addr, banksim.Config{CallbackURL: *callbackURL, Secret: secret, StateFile: *stateFile,
		Seed: *seed, Faults: faults, Log: log})
}

// bankAddr is the host:port of PAYMENTS_BANK_URL, where the processor calls the bank.
func bankAddr() (string, error) {
	raw := os.Getenv("PAYMENTS_BANK_URL")
	if raw == "" {
		raw = "http://localhost:8090"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("PAYMENTS_BANK_URL %q: want http://host:port", raw)
	}
	port := cmp.Or(u.Port(), map[string]string{"https": "443"}[u.Scheme], "80")
	host := u.Hostname()
	if host == "localhost" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// flagsFromEnv sets each flag from PAYMENTS_BANKSIM_<NAME>, before the command line is parsed.
func flagsFromEnv(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "PAYMENTS_BANKSIM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("banksim: %s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

// isHelp reports whether arg asks for help, as the flag package reads it.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h":
		return true
	}
	return false
}

// wantsHelp reports whether the command line asks for help (before any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelp(a) {
			return true
		}
	}
	return false
}
