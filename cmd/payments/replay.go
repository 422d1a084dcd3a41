package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/payments/payments/transfers"
	"github.com/payments/payments/worker"
)

// runReplay is `replay failed [--since D]` and `replay history FILE.json`.
func runReplay(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("replay: usage: replay failed [--since DURATION] | replay history FILE.json")
	}
	switch args[0] {
	case "failed":
		return replayFailed(ctx, args[1:], stdout)
	case "history":
		return replayHistory(args[1:], stdout)
	}
	return usagef("replay: unknown %q; use 'replay failed' or 'replay history'", args[0])
}

func replayFailed(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("replay failed")
	since := fs.Duration("since", 0, "only workflows that failed within this long, e.g. 24h (default: all)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *since < 0 {
		return usagef("replay failed: --since must not be negative")
	}
	d, err := open(ctx, false)
	if err != nil {
		return err
	}
	defer d.close()
	var from time.Time
	if *since > 0 {
		from = time.Now().Add(-*since)
	}
	fmt.Fprintln(stdout, "replay: looking for transfer workflows whose latest run failed…")
	counts := map[string]int{}
	err = d.transfers(false).ReplayFailed(ctx, from, func(r transfers.Rerun) {
		counts[r.Outcome]++
		fmt.Fprintf(stdout, "%-60s %-27s %-9s %s\n", r.WorkflowID, r.TransferID, r.Outcome, r.Detail)
	})
	if err != nil {
		return err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	fmt.Fprintf(stdout, "replayed %d: %d completed, %d rejected, %d failed again, %d skipped, %d errors\n", total,
		counts["completed"], counts["rejected"], counts["failed"], counts["skipped"], counts["error"])
	if counts["failed"]+counts["error"] > 0 {
		return errExitOne
	}
	return nil
}

func replayHistory(files []string, stdout io.Writer) error {
	if len(files) == 0 {
		return usagef("replay history: name one or more history files (temporal workflow show --output json)")
	}
	for _, f := range files {
		if strings.HasPrefix(f, "-") {
			return usagef("replay history: unknown flag %s", f)
		}
	}
	failed := 0
	for _, file := range files {
		if err := worker.ReplayHistory(file); err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL  %s: %v\n", file, err)
			continue
		}
		fmt.Fprintf(stdout, "ok    %s\n", file)
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d histories do not replay against this build: it would break their running workflows\n", failed, len(files))
		return errExitOne
	}
	return nil
}
