// Package supervise starts the processes this system runs beside itself (the Temporal server, the
// bank simulator, payments processes in tests) so that none outlives the process that started
// it, stops them (an interrupt, then a kill), waits until they answer, finds free local ports for
// them and builds the payments command they run.
package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// Child is a process started by Start: on Linux it is killed (SIGKILL) when this process
// dies, however it dies: a panic, a test's -timeout, os.Exit, SIGKILL.
type Child struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// Start starts cmd so that it does not outlive this process, and reaps it when it exits.
// Do not call cmd.Wait: call the Child's Wait.
//
// The kernel sends the parent-death signal (SysProcAttr.Pdeathsig) when the thread that forked
// the child exits, not when the process does (golang/go#27505), and the Go runtime ends a thread
// when a goroutine locked to it returns without unlocking it: a library doing that on the thread
// that happened to run cmd.Start would kill the child in the middle of a test. So cmd is started
// from a goroutine locked to its own thread, which no other goroutine can run on, and which stays
// in cmd.Wait for as long as the child lives: its thread ends only after the child has.
func Start(cmd *exec.Cmd) (*Child, error) {
	if cmd.Process != nil {
		return nil, errors.New("supervise: Start on a started command")
	}
	dieWithParent(cmd)
	c := &Child{Cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine returns, after the child has exited, its thread
		// ends with it instead of going back to the runtime's pool.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child to exit and returns what cmd.Wait returned.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Kill kills the child and waits for it to exit.
func (c *Child) Kill() error {
	_ = c.Cmd.Process.Kill() // fails only when it has already exited
	return c.Wait()
}

// Err is, like a context's, nil until Done is closed; then an error that says how the child ended.
func (c *Child) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	if c.err != nil {
		return fmt.Errorf("it exited (%w)", c.err)
	}
	return errors.New("it exited")
}

// Stop interrupts the child and waits for it to exit; if it has not within grace, Stop kills it.
// It returns nil once the child has exited by itself, however it ended (Wait says how), and an
// error if it had to be killed.
func (c *Child) Stop(grace time.Duration) error { return c.StopWith(os.Interrupt, grace) }

// StopWith is Stop with sig for the interrupt (PostgreSQL's immediate shutdown is SIGQUIT).
func (c *Child) StopWith(sig os.Signal, grace time.Duration) error {
	if err := c.Cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = c.Kill()
		return fmt.Errorf("could not be interrupted (%w) and was killed", err) // Windows
	}
	select {
	case <-c.done:
		return nil
	case <-time.After(grace):
		_ = c.Kill()
		return fmt.Errorf("did not stop within %v of %s and was killed", grace, signalName(sig))
	}
}

func signalName(sig os.Signal) string {
	if sig == os.Interrupt {
		return "an interrupt"
	}
	return "signal " + sig.String()
}
