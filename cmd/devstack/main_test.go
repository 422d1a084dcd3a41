package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/rig/supervise"
	"github.com/payments/payments/rig/testenv"
)

// make run listens on loopback only: every socket its processes (the dev server and its UI,
// the bank simulator, payments serve) listen on, on the ports it was given or any other, is on
// 127.0.0.1 or ::1. Its demo keys are well known and its webhooks may aim at local services.
func TestMakeRunListensOnLoopbackOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := testenv.FreshDatabase(ctx, "payments_test_devstack")
	if err != nil {
		t.Fatal(err)
	}
	// The variables make run sets for its processes, unset as in a newcomer's shell (and
	// restored after the test); the addresses the test gives are its own ports.
	for _, name := range []string{"PAYMENTS_HTTP_ADDR", "PAYMENTS_METRICS_ADDR", "TEMPORAL_ADDRESS", "PAYMENTS_BANK_SECRET",
		"PAYMENTS_WEBHOOK_ALLOW_INSECURE"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	t.Setenv("DATABASE_URL", url)
	bankPort := freePort(t)
	t.Setenv("PAYMENTS_BANK_URL", "http://localhost:"+bankPort)
	ready := make(chan struct{})
	s := stack{data: t.TempDir(), temporal: filepath.Join(testenv.RepoRoot(), "bin", "temporal"),
		payments: filepath.Join(t.TempDir(), "payments"), apiPort: freePort(t), temporalPort: freePort(t), uiPort: freePort(t),
		ready: func() { close(ready) }}
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("make run ended before it was ready: %v", err)
	case <-time.After(5 * time.Minute): // it builds bin/payments first
		t.Fatal("make run not ready within 5 minutes")
	}

	// The README's examples read the demo keys and accounts from there.
	if b, err := os.ReadFile(filepath.Join(s.data, demoEnv)); err != nil ||
		!regexp.MustCompile(`(?m)^KEY=pk_demo_alice_\w+\nBOB=pk_demo_bob_\w+\nALICE_ACC=acc_\w+\nBOB_ACC=acc_\w+$`).Match(b) {
		t.Errorf("%s: %v\n%s", demoEnv, err, b)
	}
	listening := listeningSockets(t, childPids(t))
	for _, port := range []string{s.apiPort, s.temporalPort, s.uiPort, bankPort} {
		if !listening[port] {
			t.Errorf("nothing of make run's listens on port %s; its sockets: %v", port, listening)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("make run stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("make run did not stop within a minute of Ctrl-C")
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	port, err := supervise.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// childPids are the processes this one started.
func childPids(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	var pids []string
	for _, stat := range dirs {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces, never ")".
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == me {
			pids = append(pids, filepath.Base(filepath.Dir(stat)))
		}
	}
	if len(pids) < 3 {
		t.Fatalf("%d processes started (%v), want the dev server, the bank simulator and payments serve", len(pids), pids)
	}
	return pids
}

// listeningSockets are the ports pids listen on (TCP), failing the test for any that is not on
// a loopback address.
func listeningSockets(t *testing.T, pids []string) map[string]bool {
	t.Helper()
	inodes := map[string]string{} // socket inode → its process
	for _, pid := range pids {
		fds, _ := filepath.Glob("/proc/" + pid + "/fd/*")
		for _, fd := range fds {
			if link, err := os.Readlink(fd); err == nil && strings.HasPrefix(link, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = pid
			}
		}
	}
	ports := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			const listen = "0A"
			if len(fields) < 10 || fields[3] != listen || inodes[fields[9]] == "" {
				continue
			}
			ip, port := procAddr(t, fields[1])
			if !ip.IsLoopback() {
				t.Errorf("process %s (%s) listens on %s port %s: not loopback", inodes[fields[9]], comm(inodes[fields[9]]), ip, port)
			}
			ports[port] = true
		}
		f.Close()
	}
	return ports
}

// procAddr reads an address of /proc/net/tcp{,6}: the IP in hex, in 32-bit words of the host's
// byte order (little-endian here), then the port in hex.
func procAddr(t *testing.T, s string) (net.IP, string) {
	t.Helper()
	h, p, _ := strings.Cut(s, ":")
	b, err := hex.DecodeString(h)
	port, err2 := strconv.ParseUint(p, 16, 16)
	if err != nil || err2 != nil || len(b)%4 != 0 {
		t.Fatalf("address %q in /proc/net/tcp", s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b), fmt.Sprint(port)
}

func comm(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(b))
}

// make run-cluster's APIs and workers listen on loopback only, on the ports its banner names.
// (The Temporal cluster and its UI bind 127.0.0.1 by deploy/temporal's configuration, which
// rig/cluster's tests start.)
func TestMakeRunClusterListensOnLoopbackOnly(t *testing.T) {
	apis, workers := clusterProcesses()
	want := map[string]string{"api-1": "8080", "api-2": "8081", "worker-1": "9090", "worker-2": "9091"}
	for _, p := range append(apis, workers...) {
		name, addr, _ := strings.Cut(p.env(), "=")
		host, port, err := net.SplitHostPort(addr)
		if err != nil || name != p.variable || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() || port != want[p.name] {
			t.Errorf("%s listens on %s=%s, want loopback, port %s", p.name, name, addr, want[p.name])
		}
	}
	if len(apis) != 2 || len(workers) != 2 {
		t.Errorf("%d APIs and %d workers, want 2 and 2", len(apis), len(workers))
	}
}
