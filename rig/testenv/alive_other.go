//go:build !unix

package testenv

// processAlive cannot tell here, so it says every process is alive: leftovers stay rather than
// risk dropping the database of a run in progress.
func processAlive(int) bool { return true }
