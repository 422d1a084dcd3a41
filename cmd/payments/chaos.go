package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/payments/payments/chaos"
)

// runChaos runs a chaos run per seed on a system of its own (docs/reliability.md); exit 1 on a violation.
func runChaos(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("chaos")
	seeds := fs.String("seeds", "1", "comma-separated seeds: one run each")
	ops := fs.Int("ops", 10_000, "operations per run")
	clients := fs.Int("clients", 8, "clients sending at once")
	keep := fs.Bool("keep", false, "keep each run's directory (logs, PostgreSQL's data)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var list []uint64
	for _, s := range strings.Split(*seeds, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return usagef("chaos: --seeds: %q is not a seed (a non-negative integer)", s)
		}
		list = append(list, n)
	}
	if *ops < 1 || *clients < 1 {
		return usagef("chaos: --ops and --clients must be at least 1")
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	failed := 0
	for _, seed := range list {
		r, err := chaos.Run(ctx, chaos.Options{Seed: seed, Ops: *ops, Clients: *clients, Bin: bin, Root: root, Out: stdout, Keep: *keep})
		if err != nil {
			return fmt.Errorf("chaos run, seed %d: %w", seed, err)
		}
		r.Print(stdout)
		if len(r.Violations) > 0 {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d runs found violations.\n", failed, len(list))
		return errExitOne
	}
	return nil
}
