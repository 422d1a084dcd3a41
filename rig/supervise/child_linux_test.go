package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startOnDyingThread runs start on a goroutine locked to its thread, which ends when start returns.
func startOnDyingThread(start func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		start()
	}()
	<-done
}

// exited says whether pid is gone, or a zombie.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // the command may hold spaces
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// eventually says whether cond holds within a second.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// The parent-death signal fires when the thread that forked the child ends, not the process
// (golang/go#27505): started the plain way from a thread that then ends, a child is killed at
// once. Through Start, it lives on. (A goroutine locked to the main thread does not end
// it, so not every plain child dies: the test starts several.)
func TestChildOutlivesTheThreadThatStartedIt(t *testing.T) {
	const n = 5
	var plain []*exec.Cmd
	var children []*Child
	defer func() {
		for _, cmd := range plain {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		for _, c := range children {
			_ = c.Kill()
		}
	}()
	for range n {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		startOnDyingThread(func() {
			if err := cmd.Start(); err == nil {
				plain = append(plain, cmd)
			}
		})
		startOnDyingThread(func() {
			if c, err := Start(exec.Command("sleep", "60")); err == nil {
				children = append(children, c)
			}
		})
	}
	if len(plain) != n || len(children) != n {
		t.Fatalf("started %d plain children and %d through Start, want %d of each", len(plain), len(children), n)
	}
	anyDied := eventually(func() bool {
		for _, cmd := range plain {
			if exited(cmd.Process.Pid) {
				return true
			}
		}
		return false
	})
	if !anyDied {
		t.Fatal("no plain child died with the thread that started it: this test shows nothing here")
	}
	time.Sleep(100 * time.Millisecond)
	for _, c := range children {
		if exited(c.Pid()) {
			t.Errorf("a child died with the thread that called Start: %v", c.Wait())
		}
	}
}

// helperEnv makes the test binary, run again by TestChildDiesWithItsParent, start a child and
// wait to be killed.
const helperEnv = "DEVSERVER_HELPER"

func TestHelperParent(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("a helper process for TestChildDiesWithItsParent")
	}
	child, err := Start(exec.Command("sleep", "600"))
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	fmt.Println(child.Pid())
	select {}
}

// A child started by Start dies when its parent is SIGKILLed.
func TestChildDiesWithItsParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^TestHelperParent$", "-test.count=1")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	_, err = fmt.Fscan(out, &pid)
	_ = parent.Process.Kill()
	_ = parent.Wait()
	if err != nil {
		t.Fatalf("the helper did not report its child: %v", err)
	}
	if !eventually(func() bool { return exited(pid) }) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the child %d outlived its SIGKILLed parent", pid)
	}
}
