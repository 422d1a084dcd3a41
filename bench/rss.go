package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WatchRSS samples the resident memory of processes (Linux /proc) until ctx ends, and returns a
// function giving each one's peak in MiB so far.
func WatchRSS(ctx context.Context, pids []int) func() map[string]float64 {
	var mu sync.Mutex
	peak := map[string]float64{}
	sample := func() {
		for _, pid := range pids {
			name := fmt.Sprintf("pid %d (%s)", pid, command(pid))
			if mib, err := rssMiB(pid); err == nil {
				mu.Lock()
				peak[name] = max(peak[name], mib)
				mu.Unlock()
			}
		}
	}
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() map[string]float64 {
		sample()
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]float64, len(peak))
		for k, v := range peak {
			out[k] = v
		}
		return out
	}
}

func rssMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func command(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\x00", " ")), " ")
}

// cpuSeconds is the CPU time (user + system) process pid has used so far.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (which may hold spaces) start after the last ')'.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

// cpuMeter measures how many cores the processes whose command line starts with each of its
// names used over an interval (all PostgreSQL backends, say), those started meanwhile included.
type cpuMeter struct {
	names []string
	start map[int]float64
	t0    time.Time
}

func startCPU(names []string) *cpuMeter {
	m := &cpuMeter{names: names, start: map[int]float64{}, t0: time.Now()}
	for pid := range m.matching() {
		if s, err := cpuSeconds(pid); err == nil {
			m.start[pid] = s
		}
	}
	return m
}

// matching maps the pid of each process one of the names covers to that name.
func (m *cpuMeter) matching() map[int]string {
	out := map[int]string{}
	if len(m.names) == 0 {
		return out
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd := shortName(pid)
		for _, n := range m.names {
			if strings.HasPrefix(cmd, n) {
				out[pid] = n
				break
			}
		}
	}
	return out
}

// cores returns, per name, the CPU its processes used since startCPU divided by the wall time.
func (m *cpuMeter) cores() map[string]float64 {
	out := map[string]float64{}
	for _, n := range m.names {
		out[n] = 0
	}
	wall := time.Since(m.t0).Seconds()
	for pid, name := range m.matching() {
		if end, err := cpuSeconds(pid); err == nil && wall > 0 {
			out[name] += (end - m.start[pid]) / wall
		}
	}
	return out
}

// shortName is how a process is named in the report: its program and first argument
// ("payments api", "temporal server" for the dev server, "postgres:" for a backend), and a
// Temporal cluster's service process by its service ("temporal-server history").
func shortName(pid int) string {
	fields := strings.Fields(command(pid))
	if len(fields) == 0 {
		return fmt.Sprint(pid)
	}
	if strings.HasSuffix(fields[0], "temporal-server/server") {
		if i := slices.Index(fields, "--service"); i > 0 && i+1 < len(fields) {
			return "temporal-server " + fields[i+1]
		}
	}
	name := fields[0][strings.LastIndexByte(fields[0], '/')+1:] // "postgres:" for a PostgreSQL backend
	if len(fields) > 1 {
		name += " " + fields[1]
	}
	return name
}
