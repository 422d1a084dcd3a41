package testenv

import (
	"testing"
	"time"
)

// SettlePeriod is how long a check that nothing more arrives (no duplicate delivery, no request
// after a deletion) waits once the expected count is reached, before it counts again: longer
// than a delivery's retry backoff and a worker's poll, so that a late duplicate shows.
const SettlePeriod = 2 * time.Second

// WaitForCount waits, as WaitFor does, until count() reaches want, then waits SettlePeriod and
// fails t (without stopping it, so that the test can say more) unless count() is still exactly
// want. It returns the last count. Stopping the moment want is reached would let a late
// duplicate escape.
func WaitForCount(t testing.TB, what string, want int, count func() int) int {
	t.Helper()
	WaitFor(t, what, func() bool { return count() >= want })
	time.Sleep(SettlePeriod)
	got := count()
	if got != want {
		t.Errorf("%s: %d, want exactly %d (counted again %s after reaching it)", what, got, want, SettlePeriod)
	}
	return got
}
