//go:build !linux

package supervise

import "os/exec"

// dieWithParent does nothing where there is no parent-death signal: there the processes a test
// started outlive it if it dies abruptly (package testenv still drops its database and removes
// its dev server's state on a later run).
func dieWithParent(*exec.Cmd) {}
