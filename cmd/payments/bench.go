package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/payments/payments/bench"
)

// runBench drives the running API and prints what a transfer costs (docs/benchmarks.md).
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("bench")
	api := fs.String("api", "http://localhost:8080", "base URL of the running API")
	clients := fs.Int("clients", 16, "concurrent clients in the load phases")
	duration := fs.Duration("duration", 10*time.Second, "length of each load phase")
	sequential := fs.Duration("sequential", 5*time.Second, "length of each one-client phase (0 skips them)")
	only := fs.String("only", "", "run only these scenarios, comma-separated: spread, hot, payout, replay, posting, empty, started, uws, tutorial")
	topology := fs.String("topology", "serve", "what --api is: serve (the API with a worker in its process) or split (payments api, the workers apart)")
	out := fs.String("json", "", "also write the results to this file, for comparison between runs")
	watch := fs.String("watch-pid", "", "comma-separated pids whose peak resident memory to report (e.g. the API and the worker)")
	cpuOf := fs.String("cpu-of", "payments serve,payments api,payments worker,temporal server,"+
		"temporal-server frontend,temporal-server history,temporal-server matching,temporal-server worker,postgres",
		"comma-separated command-line prefixes whose CPU use each phase reports (empty: none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *clients < 1 || *duration <= 0 || *sequential < 0 || (*topology != "serve" && *topology != "split") {
		return usagef("bench: --clients must be at least 1, --duration positive, --topology serve or split")
	}
	pids, err := pidList("watch-pid", *watch)
	if err != nil {
		return err
	}
	d, err := open(ctx, false)
	if err != nil {
		return err
	}
	defer d.close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	peaks := bench.WatchRSS(watchCtx, pids)

	res, err := bench.Run(ctx, bench.Config{Clients: *clients, Duration: *duration, Sequential: *sequential,
		Only: list(*only), CPUOf: list(*cpuOf), Topology: *topology, Progress: stdout},
		bench.Target{API: strings.TrimSuffix(*api, "/"), DB: d.db, Temporal: d.temporal, Converter: d.dc})
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		res.PeakRSSMiB = peaks()
	}
	res.Print(stdout)
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := res.JSON(f); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "results written to %s\n", *out)
	}
	return nil
}

// list splits a comma-separated flag value.
func list(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func pidList(flag, value string) ([]int, error) {
	var pids []int
	for _, f := range list(value) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, usagef("bench: --%s: %q is not a pid", flag, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
