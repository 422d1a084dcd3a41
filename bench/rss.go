package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
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
