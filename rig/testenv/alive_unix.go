//go:build unix

package testenv

import (
	"errors"
	"syscall"
)

// processAlive says whether a process pid exists on this machine (in this PID namespace). One
// that exists under another user counts; so does a zombie, until its parent reaps it.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
