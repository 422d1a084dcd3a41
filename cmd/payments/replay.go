package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/payments/payments/worker"
)

// runReplay is `replay history FILE.json…`: determinism replay of exported histories.
func runReplay(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("replay: usage: replay history FILE.json…")
	}
	switch args[0] {
	case "history":
		return replayHistory(args[1:], stdout)
	case "failed":
		return usagef("replay failed is now 'rerun failed' (replay means replaying a history)")
	}
	return usagef("replay: unknown %q; use 'replay history' (or 'rerun failed' to run failed transfers again)", args[0])
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
