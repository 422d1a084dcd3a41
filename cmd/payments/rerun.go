package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/payments/payments/internal/operation"
)

// runRerun is `rerun failed [--since D] [--dry-run]`: run again the transfers, payouts, payins,
// authorizations, scheduled transfers and webhook deliveries whose latest run failed, was terminated or timed out; or, with --dry-run, list them.
func runRerun(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "failed" {
		return usagef("rerun: usage: rerun failed [--since DURATION] [--dry-run]")
	}
	fs := newFlags("rerun failed")
	since := fs.Duration("since", 0, "only workflows that ended within this long, e.g. 24h (default: all)")
	dryRun := fs.Bool("dry-run", false, "list what would run again, and start nothing")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *since < 0 {
		return usagef("rerun failed: --since must not be negative")
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
	fmt.Fprintln(stdout, "rerun: looking for transfer, payout, payin, authorization, scheduled-transfer and webhook-delivery workflows whose latest run failed, was terminated or timed out…")
	counts := map[string]int{}
	report := func(r operation.Rerun) {
		counts[r.Outcome]++
		fmt.Fprintf(stdout, "%-60s %-27s %-9s %s\n", r.WorkflowID, r.ID, r.Outcome, r.Detail)
	}
	a := d.app(nil)
	if *dryRun {
		ctx = operation.DryRun(ctx)
	}
	for _, rerun := range []func(context.Context, time.Time, func(operation.Rerun)) error{
		a.Transfers.RerunFailed, a.Payouts.RerunFailed, a.Payins.RerunFailed, a.Authorizations.RerunFailed, a.Schedules.RerunFailed,
		a.Webhooks.RerunFailed,
	} {
		if err := rerun(ctx, from, report); err != nil {
			return err
		}
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if *dryRun {
		fmt.Fprintf(stdout, "--dry-run: %d would run again, %d skipped, %d errors; nothing was started\n",
			counts[operation.WouldRun], counts["skipped"], counts["error"])
		if counts["error"] > 0 {
			return errExitOne
		}
		return nil
	}
	fmt.Fprintf(stdout, "ran %d again: %d completed, %d rejected, %d started (payouts and deliveries go on), %d credited, %d failed again, %d skipped, %d errors\n",
		total, counts["completed"], counts["rejected"], counts["started"], counts["credited"]+counts["unmatched"], counts["failed"],
		counts["skipped"], counts["error"])
	if counts["failed"]+counts["error"] > 0 {
		return errExitOne
	}
	return nil
}
