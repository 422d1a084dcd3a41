package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// checks evaluates the targets of topology (Config.Topology): ratios within one run, against
// the same servers. Under serve the floor of a new transfer is an empty workflow started
// eagerly plus the posting alone; with the API apart from the workers, an empty workflow
// started and answered through the matching service (the faster of a result poll and
// Update-With-Start) plus the posting alone.
func checks(phases []Phase, topology string) []Check {
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
	floorName, floorWant, floorPhases := "floor (empty eager + posting only)", 1.15, []Phase{get(Empty, true), get(LedgerOne, true)}
	if topology == "split" {
		started := get(Started, true)
		if uws := get(UWS, true); uws.Requests > 0 && (started.Requests == 0 || uws.P50Millis < started.P50Millis) {
			started = uws
		}
		floorName, floorWant, floorPhases = "split floor (empty started and answered + posting only)", 1.3, []Phase{started, get(LedgerOne, true)}
	}
	floor := floorPhases[0].P50Millis + floorPhases[1].P50Millis
	nNew, nHot, nReplay, nTut := get(NewSpread, false), get(NewHot, false), get(Replay, false), get(Tutorial, false)
	all := []struct {
		check Check
		needs []Phase
	}{
		{Check{Name: "new-transfer throughput / tutorial throughput", Ratio: ratio(nNew.PerSecond, nTut.PerSecond), Want: "≥ 4",
			Met: ratio(nNew.PerSecond, nTut.PerSecond) >= 4}, []Phase{nNew, nTut}},
		{Check{Name: "sequential new p50 / tutorial p50", Ratio: ratio(seqNew.P50Millis, seqTut.P50Millis), Want: "≤ 0.25",
			Met: ratio(seqNew.P50Millis, seqTut.P50Millis) <= 0.25}, []Phase{seqNew, seqTut}},
		{Check{Name: "sequential new p50 / " + floorName, Ratio: ratio(seqNew.P50Millis, floor), Want: fmt.Sprintf("≤ %.2f", floorWant),
			Met: ratio(seqNew.P50Millis, floor) <= floorWant}, append([]Phase{seqNew}, floorPhases...)},
		{Check{Name: "sequential replay p50 / new p50", Ratio: ratio(seqReplay.P50Millis, seqNew.P50Millis), Want: "≤ 0.1",
			Met: ratio(seqReplay.P50Millis, seqNew.P50Millis) <= 0.1}, []Phase{seqReplay, seqNew}},
		{Check{Name: "replay throughput / new throughput", Ratio: ratio(nReplay.PerSecond, nNew.PerSecond), Want: "≥ 100",
			Met: ratio(nReplay.PerSecond, nNew.PerSecond) >= 100}, []Phase{nReplay, nNew}},
		{Check{Name: "hot-account throughput / spread throughput", Ratio: ratio(nHot.PerSecond, nNew.PerSecond), Want: "≥ 0.95",
			Met: ratio(nHot.PerSecond, nNew.PerSecond) >= 0.95}, []Phase{nHot, nNew}},
	}
	var out []Check
	for _, c := range all {
		if !slices.ContainsFunc(c.needs, func(p Phase) bool { return p.Requests == 0 }) { // a scenario left out: no verdict
			out = append(out, c.check)
		}
	}
	return out
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
	if len(res.Phases) > 0 && len(res.Phases[0].CPUCores) > 0 {
		names := slices.Sorted(maps.Keys(res.Phases[0].CPUCores))
		fmt.Fprintf(w, "\nCPU used during each phase, in cores (the machine has %s):\n\n| scenario | clients |", res.Machine)
		for _, n := range names {
			fmt.Fprintf(w, " %s |", n)
		}
		fmt.Fprintf(w, "\n| --- | ---: |%s\n", strings.Repeat(" ---: |", len(names)))
		for _, p := range res.Phases {
			fmt.Fprintf(w, "| %s | %d |", p.Scenario, p.Clients)
			for _, n := range names {
				fmt.Fprintf(w, " %.2f |", p.CPUCores[n])
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "\nCPU per request, in ms (cores ÷ requests per second):\n\n| scenario | clients |")
		for _, n := range names {
			fmt.Fprintf(w, " %s |", n)
		}
		fmt.Fprintf(w, "\n| --- | ---: |%s\n", strings.Repeat(" ---: |", len(names)))
		for _, p := range res.Phases {
			fmt.Fprintf(w, "| %s | %d |", p.Scenario, p.Clients)
			for _, n := range names {
				fmt.Fprintf(w, " %.2f |", p.CPUCores[n]*1000/max(p.PerSecond, 1e-9))
			}
			fmt.Fprintln(w)
		}
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
