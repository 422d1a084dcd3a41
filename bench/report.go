package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// checks evaluates the targets: ratios within one run, against the same servers.
func checks(phases []Phase) []Check {
	get := func(scenario string, clients1 bool) Phase {
		for _, p := range phases {
			if p.Scenario == scenario && (p.Clients == 1) == clients1 {
				return p
			}
		}
		return Phase{}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	seqNew, seqTut, seqReplay := get(NewSpread, true), get(Tutorial, true), get(Replay, true)
	floor := get(Empty, true).P50Millis + get(LedgerOne, true).P50Millis
	nNew, nHot, nReplay, nTut := get(NewSpread, false), get(NewHot, false), get(Replay, false), get(Tutorial, false)
	return []Check{
		{"new-transfer throughput / tutorial throughput", ratio(nNew.PerSecond, nTut.PerSecond), "≥ 4", ratio(nNew.PerSecond, nTut.PerSecond) >= 4},
		{"sequential new p50 / tutorial p50", ratio(seqNew.P50Millis, seqTut.P50Millis), "≤ 0.25", ratio(seqNew.P50Millis, seqTut.P50Millis) <= 0.25},
		{"sequential new p50 / floor (empty eager + posting only)", ratio(seqNew.P50Millis, floor), "≤ 1.5", ratio(seqNew.P50Millis, floor) <= 1.5},
		{"sequential replay p50 / new p50", ratio(seqReplay.P50Millis, seqNew.P50Millis), "≤ 0.1", ratio(seqReplay.P50Millis, seqNew.P50Millis) <= 0.1},
		{"replay throughput / new throughput", ratio(nReplay.PerSecond, nNew.PerSecond), "≥ 10", ratio(nReplay.PerSecond, nNew.PerSecond) >= 10},
		{"hot-account throughput / spread throughput", ratio(nHot.PerSecond, nNew.PerSecond), "≥ 0.7", ratio(nHot.PerSecond, nNew.PerSecond) >= 0.7},
	}
}

// Print writes the table a person reads.
func (res Results) Print(w io.Writer) {
	fmt.Fprintf(w, "\n%s, %s\n\n", res.Time.Format("2006-01-02 15:04 UTC"), res.Machine)
	fmt.Fprintf(w, "| scenario | clients | requests | per second | p50 ms | p95 ms | p99 ms | errors |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range res.Phases {
		fmt.Fprintf(w, "| %s | %d | %d | %.1f | %.2f | %.2f | %.2f | %d |\n",
			p.Scenario, p.Clients, p.Requests, p.PerSecond, p.P50Millis, p.P95Millis, p.P99Millis, p.Errors)
	}
	fmt.Fprintf(w, "\nHistory events per workflow:")
	for _, k := range slices.Sorted(maps.Keys(res.HistoryEvents)) {
		fmt.Fprintf(w, " %s %d;", k, res.HistoryEvents[k])
	}
	fmt.Fprintf(w, "\n\n| target | measured | wanted | |\n| --- | ---: | --- | --- |\n")
	for _, c := range res.Targets {
		mark := "missed"
		if c.Met {
			mark = "met"
		}
		fmt.Fprintf(w, "| %s | %.2f | %s | %s |\n", c.Name, c.Ratio, c.Want, mark)
	}
	for _, k := range slices.Sorted(maps.Keys(res.PeakRSSMiB)) {
		fmt.Fprintf(w, "\nPeak RSS of %s: %.0f MiB", k, res.PeakRSSMiB[k])
	}
	fmt.Fprintln(w)
	for _, p := range res.Phases {
		if p.FirstError != "" {
			fmt.Fprintf(w, "first error in %q (%d clients): %s\n", p.Scenario, p.Clients, p.FirstError)
		}
	}
}
