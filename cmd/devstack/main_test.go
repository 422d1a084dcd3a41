package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/payments/payments/rig/supervise"
	"github.com/payments/payments/rig/testenv"
)

// make run, as a newcomer starts it. It listens on loopback only: every socket its processes
// (the dev server and its UI, the codec server, the bank simulator, payments serve) listen on,
// on the ports it was given or any other, is on 127.0.0.1 or ::1; its demo keys are well known
// and its webhooks may aim at local services. And what it writes to Temporal is sealed: the
// Web UI, in a real browser, shows a payout's destination decoded, while the history read
// without the keys does not hold it.
func TestMakeRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := testenv.FreshDatabase(ctx, "payments_test_devstack")
	if err != nil {
		t.Fatal(err)
	}
	// The variables make run sets for its processes, unset as in a newcomer's shell (and
	// restored after the test); the addresses the test gives are its own ports.
	for _, name := range []string{"PAYMENTS_HTTP_ADDR", "PAYMENTS_METRICS_ADDR", "TEMPORAL_ADDRESS", "PAYMENTS_BANK_SECRET",
		"PAYMENTS_WEBHOOK_ALLOW_INSECURE", "PAYMENTS_CODEC_KEYS", "PAYMENTS_CODEC_ADDR", "PAYMENTS_CODEC_UI_ORIGINS",
		"PAYMENTS_APPROVAL_THRESHOLD_MINOR"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	t.Setenv("DATABASE_URL", url)
	bankPort, codecPort := freePort(t), freePort(t)
	t.Setenv("PAYMENTS_BANK_URL", "http://localhost:"+bankPort)
	t.Setenv("PAYMENTS_CODEC_ADDR", "127.0.0.1:"+codecPort)
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
	for _, port := range []string{s.apiPort, s.temporalPort, s.uiPort, bankPort, codecPort} {
		if !listening[port] {
			t.Errorf("nothing of make run's listens on port %s; its sockets: %v", port, listening)
		}
	}
	if info, err := os.Stat(filepath.Join(s.data, codecKeysFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the codec key under %s: %v, %v; want it kept, mode 0600", s.data, info, err)
	}
	t.Run("the UI decodes what Temporal holds sealed", func(t *testing.T) { uiDecodes(t, s) })
	t.Run("the UI lists waiting authorizations by status, decoded", func(t *testing.T) {
		demo := readEnv(t, filepath.Join(s.data, demoEnv))
		uiShowsWaiting(t, s, waiting{route: "/v1/authorizations", query: `AuthorizationStatus="authorized"`, shows: "ui-room-12",
			body: `{"from_account_id":"` + demo["ALICE_ACC"] + `","to_account_id":"` + demo["BOB_ACC"] +
				`","amount_minor":300,"currency":"USD","expires_in":"1h","metadata":{"booking":"ui-room-12"}}`})
	})
	t.Run("the UI lists active scheduled transfers by status, decoded", func(t *testing.T) {
		demo := readEnv(t, filepath.Join(s.data, demoEnv))
		uiShowsWaiting(t, s, waiting{route: "/v1/scheduled-transfers", query: `ScheduledTransferStatus="active"`, shows: "ui-rent-7",
			body: `{"from_account_id":"` + demo["ALICE_ACC"] + `","to_account_id":"` + demo["BOB_ACC"] +
				`","amount_minor":100,"currency":"USD","start_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) +
				`","interval":"24h","metadata":{"lease":"ui-rent-7"}}`})
	})
	t.Run("the UI lists payouts waiting for approval, since when", func(t *testing.T) {
		demo := readEnv(t, filepath.Join(s.data, demoEnv))
		uiShowsWaiting(t, s, waiting{route: "/v1/payouts", query: `PayoutStatus="pending_approval"`, shows: "approval asked",
			body: `{"account_id":"` + demo["ALICE_ACC"] + `","amount_minor":` + strconv.Itoa(approvalThreshold) +
				`,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}`})
	})
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

// uiDecodes makes a payout on the stack s runs and reads its destination, an account number, in
// the Web UI's page of the payout's run, rendered by headless Chromium, which decodes through
// the codec server; the history fetched without the codec must not hold it.
func uiDecodes(t *testing.T, s stack) {
	web := openBrowser(t)
	demo := readEnv(t, filepath.Join(s.data, demoEnv))
	const accountNumber = "000987650042"
	body := `{"account_id":"` + demo["ALICE_ACC"] + `","amount_minor":500,"currency":"USD",` +
		`"destination":{"account_number":"` + accountNumber + `","bank_code":"BANKUS33"}}`
	req, _ := http.NewRequest("POST", "http://127.0.0.1:"+s.apiPort+"/v1/payouts", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+demo["KEY"])
	req.Header.Set("Idempotency-Key", "ui-decodes")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var po struct {
		WorkflowID string `json:"workflow_id"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &po); err != nil || resp.StatusCode != http.StatusCreated || po.WorkflowID == "" {
		t.Fatalf("POST /v1/payouts: %d %s", resp.StatusCode, b)
	}

	// Without the codec: the history, as whoever reads Temporal's database or API sees it.
	c, err := client.Dial(client.Options{HostPort: "127.0.0.1:" + s.temporalPort})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var raw strings.Builder
	var runID string
	it := c.GetWorkflowHistory(context.Background(), po.WorkflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			runID = a.GetOriginalExecutionRunId()
		}
		j, _ := protojson.Marshal(e)
		raw.Write(j)
	}
	if runID == "" || strings.Contains(raw.String(), accountNumber) ||
		strings.Contains(raw.String(), base64.StdEncoding.EncodeToString([]byte(`"` + accountNumber))[:12]) {
		t.Fatalf("the history read without the keys holds the destination (or has no start): %.2000s", raw.String())
	}

	// With it: the Web UI, in a browser, asks the codec server and shows the input as JSON.
	page := fmt.Sprintf("http://127.0.0.1:%s/namespaces/default/workflows/%s/%s/history", s.uiPort, url.PathEscape(po.WorkflowID), runID)
	web.call(t, "POST", "/url", map[string]any{"url": page}, nil)
	var text string
	testenv.WaitFor(t, "the payout's page in the Web UI showing the destination decoded", func() bool {
		web.call(t, "POST", "/execute/sync", map[string]any{"script": "return document.body.innerText", "args": []any{}}, &text)
		return strings.Contains(text, accountNumber)
	})
}

// waiting is an object that waits, for uiShowsWaiting: POSTed to route with body, listed in the
// Web UI by query, its page showing shows (decoded through the codec server).
type waiting struct{ route, body, query, shows string }

// uiShowsWaiting makes w as alice and finds its run in the Web UI: listed by w.query, and its
// page showing w.shows, which only its sealed input, memo or summary hold.
func uiShowsWaiting(t *testing.T, s stack, w waiting) {
	web := openBrowser(t)
	demo := readEnv(t, filepath.Join(s.data, demoEnv))
	req, _ := http.NewRequest("POST", "http://127.0.0.1:"+s.apiPort+w.route, strings.NewReader(w.body))
	req.Header.Set("Authorization", "Bearer "+demo["KEY"])
	req.Header.Set("Idempotency-Key", "ui-waits")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var au struct {
		WorkflowID string `json:"workflow_id"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &au); err != nil || resp.StatusCode != http.StatusCreated || au.WorkflowID == "" {
		t.Fatalf("POST %s: %d %s", w.route, resp.StatusCode, b)
	}
	list := fmt.Sprintf("http://127.0.0.1:%s/namespaces/default/workflows?query=%s", s.uiPort,
		url.QueryEscape(w.query))
	web.call(t, "POST", "/url", map[string]any{"url": list}, nil)
	var text string
	loaded := time.Now()
	testenv.WaitFor(t, "the run listed under "+w.query, func() bool {
		web.call(t, "POST", "/execute/sync", map[string]any{"script": "return document.body.innerText", "args": []any{}}, &text)
		if strings.Contains(text, au.WorkflowID) {
			return true
		}
		if time.Since(loaded) > 3*time.Second { // visibility lags, and the list does not refresh itself
			web.call(t, "POST", "/url", map[string]any{"url": list}, nil)
			loaded = time.Now()
		}
		return false
	})
	c, err := client.Dial(client.Options{HostPort: "127.0.0.1:" + s.temporalPort})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc, err := c.DescribeWorkflowExecution(context.Background(), au.WorkflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	page := fmt.Sprintf("http://127.0.0.1:%s/namespaces/default/workflows/%s/%s/history", s.uiPort, url.PathEscape(au.WorkflowID),
		desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	web.call(t, "POST", "/url", map[string]any{"url": page}, nil)
	testenv.WaitFor(t, "the run's page showing "+w.shows, func() bool {
		web.call(t, "POST", "/execute/sync", map[string]any{"script": "return document.body.innerText", "args": []any{}}, &text)
		return strings.Contains(text, w.shows)
	})
}

// browser is a WebDriver session of headless Chromium (Debian's chromium and chromium-driver,
// which .ci/run installs), driven through chromedriver's HTTP protocol.
type browser struct{ base string }

// openBrowser starts chromedriver on a free loopback port and a session in it, both ended with
// t. Without the packages the test is skipped, except in CI, where it fails.
func openBrowser(t *testing.T) *browser {
	t.Helper()
	for _, bin := range []string{"/usr/bin/chromium", "/usr/bin/chromedriver"} {
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("no %s: .ci/run installs Debian's chromium and chromium-driver", bin)
			}
			t.Skipf("no %s (apt-get install chromium chromium-driver) to open the Web UI in", bin)
		}
	}
	port := freePort(t)
	driver, err := supervise.Start(exec.Command("/usr/bin/chromedriver", "--port="+port, "--allowed-ips=127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = driver.Kill() })
	b := &browser{base: "http://127.0.0.1:" + port}
	if err := supervise.WaitReady(context.Background(), "chromedriver", 30*time.Second, 100*time.Millisecond, driver.Err,
		supervise.HTTPReady(b.base+"/status")); err != nil {
		t.Fatal(err)
	}
	var session struct {
		SessionID string `json:"sessionId"`
	}
	b.call(t, "POST", "", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"goog:chromeOptions": map[string]any{"binary": "/usr/bin/chromium", "args": []string{"--headless", "--no-sandbox",
			"--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
			"--disable-sync", "--user-data-dir=" + t.TempDir()}}}}}, &session)
	b.base += "/session/" + session.SessionID
	t.Cleanup(func() { b.call(t, "DELETE", "", nil, nil) })
	return b
}

// call sends a WebDriver command (path under the session; "" for the session itself) and reads
// its value into out, when not nil.
func (b *browser) call(t *testing.T, method, path string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		j, _ := json.Marshal(in)
		body = bytes.NewReader(j)
	}
	base := b.base
	if method == "POST" && path == "" { // a new session
		base += "/session"
	}
	req, _ := http.NewRequest(method, base+path, body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("WebDriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("WebDriver %s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out == nil {
		return
	}
	var v struct{ Value json.RawMessage }
	if err := json.Unmarshal(raw, &v); err != nil || json.Unmarshal(v.Value, out) != nil {
		t.Fatalf("WebDriver %s %s: %s", method, path, raw)
	}
}

// readEnv reads a file of NAME=value lines (demo.env).
func readEnv(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
			vars[k] = strings.Trim(v, `'"`)
		}
	}
	return vars
}
