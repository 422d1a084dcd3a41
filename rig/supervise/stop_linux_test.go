package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, name string, args ...string) *Child {
	t.Helper()
	c, err := Start(exec.Command(name, args...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kill() })
	return c
}

// Stop interrupts a child; one that ignores the interrupt is killed once grace has passed.
func TestStopInterruptsThenKills(t *testing.T) {
	c := start(t, "sleep", "60")
	if err := c.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop of a child that takes interrupts: %v", err)
	}
	if c.Err() == nil || !strings.Contains(c.Wait().Error(), "interrupt") {
		t.Errorf("the child ended with %v (Err %v), want an interrupt", c.Wait(), c.Err())
	}
	// An ignored signal stays ignored across exec: once the shell is sleep, the trap is set.
	deaf := start(t, "sh", "-c", `trap "" INT; exec sleep 60`)
	if !eventually(func() bool {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", deaf.Pid()))
		return strings.TrimSpace(string(comm)) == "sleep"
	}) {
		t.Fatal("the shell did not become sleep")
	}
	began := time.Now()
	if err := deaf.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop of a child that ignores interrupts: %v, want it killed", err)
	}
	if deaf.Err() == nil || time.Since(began) > 5*time.Second {
		t.Errorf("the child is not gone %v after Stop", time.Since(began))
	}
	if err := c.Stop(time.Second); err != nil {
		t.Errorf("Stop of a child already gone: %v", err)
	}
}

// WaitReady returns once the probe answers, and gives up when the child exits, when its time
// is up or when ctx ends.
func TestWaitReady(t *testing.T) {
	ctx := context.Background()
	calls := 0
	probe := func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	if err := WaitReady(ctx, "it", time.Minute, time.Millisecond, nil, probe); err != nil || calls != 3 {
		t.Errorf("WaitReady: %v after %d probes, want nil after 3", err, calls)
	}
	never := func(context.Context) error { return errors.New("refused") }
	gone := start(t, "true")
	<-gone.Done()
	if err := WaitReady(ctx, "true", time.Minute, time.Millisecond, gone.Err, never); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("WaitReady on an exited child: %v", err)
	}
	if err := WaitReady(ctx, "it", 20*time.Millisecond, time.Millisecond, nil, never); err == nil || !strings.Contains(err.Error(), "within") {
		t.Errorf("WaitReady past its time: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := WaitReady(canceled, "it", 0, time.Millisecond, nil, never); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitReady on an ended context: %v", err)
	}
}
