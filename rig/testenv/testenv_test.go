package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// helperEnv makes the test binary, run again by a test here, play a test process that dies.
const helperEnv = "TESTENV_HELPER"

// childName is the name the dying helper of mode and the test give Start or FreshDatabase.
func childName(mode string) string { return "payments_test_testenv_" + strings.ToLower(mode) }

// report is what the helper tells the test about the Env it started.
type report struct {
	URL, DevAddr, StateDir string
	ProcessPID             int
}

const reportMark = "TESTENV-REPORT "

// TestHelperDyingRun is not a test: run by TestLeftoversOfADeadRun, it starts an Env from a
// "TestMain" (no t.Cleanup closes it), starts a process on it, reports, and dies: it panics in a
// goroutine of its own, as `go test -timeout` does, so that no deferred call and no Cleanup runs;
// or it waits to be killed.
func TestHelperDyingRun(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("a helper process for TestLeftoversOfADeadRun")
	}
	e, err := Start(context.Background(), childName(mode), Options{})
	if err != nil {
		fmt.Println("helper:", err)
		os.Exit(3)
	}
	cmd := e.Process(t, "sleep", "", []string{"600"})
	b, _ := json.Marshal(report{URL: e.URL, DevAddr: e.TemporalAddr(), StateDir: e.stateDir, ProcessPID: cmd.Process.Pid})
	fmt.Println(reportMark + string(b))
	if mode == "panic" {
		go func() { panic("test timed out (simulated)") }()
	}
	select {}
}

// A test process that dies without closing its Env leaves nothing running, and nothing in the
// way: the dev server and the processes it started die with it; its database does not share a
// name with another run's, so a run beside it does not drop it; and the next run drops it and
// removes the dev server's state.
func TestLeftoversOfADeadRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a test's processes die with it only on Linux (Pdeathsig)")
	}
	// One after the other: each one's FreshDatabase sweeps every dead run's leftovers, the
	// other's included, which the other still has to find.
	for _, mode := range []string{"panic", "SIGKILL"} {
		t.Run(mode, func(t *testing.T) { leftoversOfADeadRun(t, mode) })
	}
}

func leftoversOfADeadRun(t *testing.T, mode string) {
	ctx := context.Background()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDyingRun$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var child report
	var output strings.Builder
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if line, ok := strings.CutPrefix(lines.Text(), reportMark); ok {
			if err := json.Unmarshal([]byte(line), &child); err != nil {
				t.Fatal(err)
			}
			break
		}
		output.WriteString(lines.Text() + "\n")
	}
	if child.URL == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the helper did not report:\n%s%s", output.String(), stderr.String())
	}
	childDB := databaseOf(t, child.URL)

	// While the helper runs, this process makes a database for the same name: its own.
	url, err := FreshDatabase(ctx, childName(mode))
	if err != nil {
		t.Fatal(err)
	}
	own := databaseOf(t, url)
	t.Cleanup(func() { _ = dropDatabase(context.Background(), own) })
	if own == childDB {
		t.Errorf("this process and the helper share database %s", own)
	} else if !databaseExists(t, childDB) {
		t.Errorf("making a database for %s dropped the running helper's %s", childName(mode), childDB)
	}

	if mode == "SIGKILL" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	} else if err := cmd.Wait(); err == nil || !strings.Contains(stderr.String(), "test timed out (simulated)") {
		t.Fatalf("the helper did not panic: %v\n%s", err, stderr.String())
	}
	WaitFor(t, "the helper's dev server to stop answering", func() bool {
		c, err := net.DialTimeout("tcp", child.DevAddr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	WaitFor(t, "the helper's process to die", func() bool { return gone(child.ProcessPID) })

	// Left behind, until another run starts.
	if !databaseExists(t, childDB) {
		t.Fatalf("the helper's database %s is gone already: the test proves nothing", childDB)
	}
	if _, err := os.Stat(child.StateDir); err != nil {
		t.Fatalf("the helper's dev server state %s: %v", child.StateDir, err)
	}
	if _, err := FreshDatabase(ctx, childName(mode)); err != nil {
		t.Fatal(err)
	}
	if databaseExists(t, childDB) {
		t.Errorf("the dead helper's database %s was not dropped", childDB)
	}
	if _, err := os.Stat(child.StateDir); !os.IsNotExist(err) {
		t.Errorf("the dead helper's dev server state %s was not removed: %v", child.StateDir, err)
	}
}

// Only the databases of processes that are gone are dropped: not one of a live process, nor one
// whose name says no process.
func TestLeftoversOfLiveProcessesStay(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("leftovers are kept where processAlive cannot tell")
	}
	ctx := context.Background()
	live := exec.Command("sleep", "600")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ofLive := fmt.Sprintf("payments_test_testenv_other_%d", live.Process.Pid)
	ofDead := fmt.Sprintf("payments_test_testenv_other_%d", dead.Process.Pid)
	noPID := "payments_test_testenv_other"
	for _, name := range []string{ofLive, ofDead, noPID} {
		createDatabase(t, name)
	}
	liveDir, err := os.MkdirTemp("", ofLive+"-temporal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(liveDir) })
	deadDir, err := os.MkdirTemp("", ofDead+"-temporal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(deadDir) })

	admin := adminConn(t)
	dropLeftovers(ctx, admin) // as FreshDatabase does
	if !databaseExists(t, ofLive) || !databaseExists(t, noPID) {
		t.Errorf("dropped a database of a live process (%s: %v) or of none (%s: %v)",
			ofLive, databaseExists(t, ofLive), noPID, databaseExists(t, noPID))
	}
	if databaseExists(t, ofDead) {
		t.Errorf("kept %s, of a process that is gone", ofDead)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("removed %s, of a live process: %v", liveDir, err)
	}
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("kept %s, of a process that is gone: %v", deadDir, err)
	}

	_ = live.Process.Kill()
	_ = live.Wait()
	dropLeftovers(ctx, admin)
	if databaseExists(t, ofLive) {
		t.Errorf("kept %s once its process was gone", ofLive)
	}
	if !databaseExists(t, noPID) {
		t.Errorf("dropped %s", noPID)
	}
}

// A Start that fails half-way, here on an unreachable PostgreSQL once the dev server answers,
// leaves no dev server, database or state behind.
func TestFailedStartLeavesNothing(t *testing.T) {
	const name = "payments_test_testenv_failed"
	before := children(t)
	if e, err := Start(context.Background(), name, Options{DatabaseHost: FreeAddr()}); err == nil {
		e.Close()
		t.Fatal("Start succeeded on an unreachable PostgreSQL")
	}
	for pid := range children(t) {
		if !before[pid] {
			t.Errorf("Start left a process running: %d", pid)
		}
	}
	admin := adminConn(t)
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE starts_with(datname, $1)`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("Start left %d databases for %s", n, name)
	}
	for _, dir := range []string{"/dev/shm", os.TempDir()} {
		if left, _ := filepath.Glob(filepath.Join(dir, name+"*")); len(left) > 0 {
			t.Errorf("Start left %v", left)
		}
	}
}

// children are the running (not zombie) processes whose parent is this one.
func children(t *testing.T) map[int]bool {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		t.Skip("no /proc here")
	}
	found := map[int]bool{}
	for _, stat := range stats {
		state, ppid, ok := procStat(stat)
		if ok && ppid == os.Getpid() && state != "Z" {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(stat)))
			found[pid] = true
		}
	}
	return found
}

// procStat reads a process's state and parent from /proc/PID/stat.
func procStat(path string) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // the command may hold spaces
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	return fields[0], ppid, true
}

// gone says whether pid has exited: it no longer exists, or it is a zombie nobody reaped yet.
func gone(pid int) bool {
	state, _, ok := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	return !ok || state == "Z" || state == "X"
}

func databaseOf(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}

func adminConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	var exists bool
	if err := adminConn(t).QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// createDatabase creates an empty database name, dropped when t ends.
func createDatabase(t *testing.T, name string) {
	t.Helper()
	admin := adminConn(t)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ident); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+ident); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dropDatabase(context.Background(), name) })
}
