package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/config"
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
	if wantsHelp(files) {
		return helpRequested{newFlags("replay history")} // it has no flags
	}
	for _, f := range files {
		if strings.HasPrefix(f, "-") {
			return usagef("replay history: unknown flag %s", f)
		}
	}
	// A file that is not a history says nothing about this build: it is the command's input
	// that is wrong (exit 2), not the workflows.
	for _, file := range files {
		if err := readHistory(file); err != nil {
			return usagef("replay history: %s is not a workflow history (temporal workflow show --output json): %v", file, err)
		}
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return usagef("%v", err)
	}
	failed := 0
	for _, file := range files {
		if err := worker.ReplayHistory(file, cfg.Temporal.Keys); err != nil {
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

// readHistory reads file as the replayer does, and says why it is not a workflow's history.
func readHistory(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return err
	}
	if len(h.GetEvents()) == 0 || h.GetEvents()[0].GetEventType() != enums.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED {
		return errors.New("it does not start with WorkflowExecutionStarted")
	}
	return nil
}
