package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/rig/testenv"
)

// keysCommand runs `payments keys …` and returns what it printed.
func keysCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := dispatch(context.Background(), append([]string{"keys"}, args...), &out)
	return out.String(), err
}

// listed is `keys list --owner name` read back: each key's line by id.
func listed(t *testing.T, name string) map[string][]string {
	t.Helper()
	out, err := keysCommand(t, "list", "--owner", name)
	if err != nil {
		t.Fatalf("keys list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !regexp.MustCompile(`^ID +SCOPES +CREATED +LAST USED +REVOKED$`).MatchString(lines[0]) {
		t.Fatalf("keys list header: %q", lines[0])
	}
	rows := map[string][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		rows[f[0]] = f
	}
	return rows
}

// The CLI issues keys with scopes, lists them (never the key), and revokes them: through HTTP,
// a read-only key reads and is refused a write, every key is 401 once revoked, and a list shows
// its last use and revocation.
func TestKeysCreateListRevoke(t *testing.T) {
	commandsOn(t, env.URL)
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	full, err := keysCommand(t, "create", "--owner", name)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := keysCommand(t, "create", "--owner", name, "--scope", "read")
	if err != nil {
		t.Fatal(err)
	}
	full, reader = strings.TrimSpace(full), strings.TrimSpace(reader)
	rows := listed(t, name)
	if len(rows) != 2 {
		t.Fatalf("%d keys listed, want 2: %v", len(rows), rows)
	}
	scopes := map[string]bool{}
	for id, f := range rows {
		if !strings.HasPrefix(id, "key_") || f[3] != "never" || f[4] != "-" {
			t.Errorf("a new key listed as %v", f)
		}
		scopes[f[1]] = true
	}
	if !scopes["read,transfers,payouts,webhooks,accounts"] || !scopes["read"] {
		t.Errorf("scopes listed %v", scopes)
	}
	out, _ := keysCommand(t, "list", "--owner", name)
	if strings.Contains(out, full) || strings.Contains(out, reader) {
		t.Fatal("keys list printed a key")
	}

	acc := env.Account(t, full, "USD")
	if r := env.Do(t, "GET", "/v1/accounts/"+acc, reader, "", ""); r.Status != http.StatusOK {
		t.Fatalf("read-only key reading: %d %s", r.Status, r.Body)
	}
	if r := env.Do(t, "POST", "/v1/accounts", reader, t.Name(), `{"currency":"USD"}`); r.Status != http.StatusForbidden ||
		testenv.ProblemType(t, r) != "insufficient-scope" {
		t.Fatalf("read-only key writing: %d %s", r.Status, r.Body)
	}
	if accounts := env.Do(t, "GET", "/v1/accounts", full, "", "").JSON(t)["data"].([]any); len(accounts) != 1 {
		t.Fatalf("%d accounts after a refused create, want 1", len(accounts))
	}

	var readerID string
	for id, f := range listed(t, name) {
		if f[1] == "read" {
			readerID = id
			if f[3] == "never" {
				t.Errorf("the reader's last use not listed: %v", f)
			}
		}
	}
	if out, err := keysCommand(t, "revoke", readerID); err != nil || out != readerID+" revoked\n" {
		t.Fatalf("keys revoke: %q %v", out, err)
	}
	if r := env.Do(t, "GET", "/v1/accounts/"+acc, reader, "", ""); r.Status != http.StatusUnauthorized ||
		!strings.Contains(string(r.Body), "revoked") || r.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("revoked key: %d %s", r.Status, r.Body)
	}
	if r := env.Do(t, "GET", "/v1/accounts/"+acc, full, "", ""); r.Status != http.StatusOK {
		t.Fatalf("the owner's other key after a revocation: %d %s", r.Status, r.Body)
	}
	if out, err := keysCommand(t, "revoke", readerID); err != nil || out != readerID+" was already revoked\n" {
		t.Fatalf("keys revoke again: %q %v", out, err)
	}
	if f := listed(t, name)[readerID]; f[4] == "-" {
		t.Errorf("a revoked key listed as %v", f)
	}
	var usage usageError
	if _, err := keysCommand(t, "revoke", "key_missing"); err == nil || errors.As(err, &usage) {
		t.Errorf("revoking an unknown key: %v, want exit 1", err)
	}
}

// A revoked key is refused by every API process from the revocation on: two `payments api`
// processes that have both just served it answer 401 to the next request each.
func TestARevokedKeyIsRefusedByEveryAPIProcessAtOnce(t *testing.T) {
	commandsOn(t, env.URL)
	bin := testenv.BuildPayments(t)
	_, a := startAPI(t, env, bin)
	_, b := startAPI(t, env, bin)
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	key, err := keysCommand(t, "create", "--owner", name)
	if err != nil {
		t.Fatal(err)
	}
	key = strings.TrimSpace(key)
	for _, base := range []string{a, b} {
		if r := testenv.DoAt(t, base, "GET", "/v1/accounts", key, "", ""); r.Status != http.StatusOK {
			t.Fatalf("%s before: %d %s", base, r.Status, r.Body)
		}
	}
	var id string
	for k := range listed(t, name) {
		id = k
	}
	if _, err := keysCommand(t, "revoke", id); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{a, b} {
		if r := testenv.DoAt(t, base, "GET", "/v1/accounts", key, "", ""); r.Status != http.StatusUnauthorized {
			t.Errorf("%s after the revocation: %d %s, want 401", base, r.Status, r.Body)
		}
	}
}

// A `payments api` with PAYMENTS_RATE_LIMIT=5 (burst 10) refuses what one key sends beyond it
// with 429 rate-limited and Retry-After, and counts the refusals; a refused transfer moved
// nothing and stored nothing (its key goes through later as a first answer); another key of the
// same owner has a bucket of its own.
func TestRateLimitPerKey(t *testing.T) {
	commandsOn(t, env.URL)
	_, base := env.StartAPI(t, testenv.BuildPayments(t), "", "PAYMENTS_RATE_LIMIT=5")
	_, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, from, 1_000)

	const n = 30
	answers := make([]testenv.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = testenv.DoAt(t, base, "POST", "/v1/transfers", key, fmt.Sprintf("%s-%d", t.Name(), i), testenv.TransferBody(from, to, 1))
		}()
	}
	wg.Wait()
	// Another key of the owner has a bucket of its own: a whole burst of it goes through now.
	other := otherKeyOf(t, key)
	others := make([]testenv.Response, 10)
	for i := range others {
		wg.Add(1)
		go func() { defer wg.Done(); others[i] = testenv.DoAt(t, base, "GET", "/v1/accounts", other, "", "") }()
	}
	wg.Wait()
	for _, r := range others {
		if r.Status != http.StatusOK {
			t.Fatalf("another key while the first is limited: %d %s", r.Status, r.Body)
		}
	}
	var refused []int
	for i, r := range answers {
		switch r.Status {
		case http.StatusCreated:
		case http.StatusTooManyRequests:
			if testenv.ProblemType(t, r) != "rate-limited" || r.Header.Get("Retry-After") == "" {
				t.Fatalf("429 without its problem or Retry-After: %v %s", r.Header, r.Body)
			}
			refused = append(refused, i)
		default:
			t.Fatalf("answer %d: %d %s", i, r.Status, r.Body)
		}
	}
	// 30 sent at once against a burst of 10 (and 5 a second more while they ran): most refused.
	if len(refused) < n/3 {
		t.Fatalf("%d of %d refused, want at least %d", len(refused), n, n/3)
	}
	if got := env.Balance(t, to); got != int64(n-len(refused)) {
		t.Fatalf("destination %d after %d transfers of 1 went through", got, n-len(refused))
	}
	if got := counter(t, base+"/metrics", "payments_rate_limited_total"); got < float64(len(refused)) {
		t.Errorf("payments_rate_limited_total %v, want at least %d", got, len(refused))
	}
	// Each refused one, sent again after its Retry-After, is a first answer.
	deadline := time.Now().Add(time.Minute)
	for _, i := range refused {
		for {
			r := testenv.DoAt(t, base, "POST", "/v1/transfers", key, fmt.Sprintf("%s-%d", t.Name(), i), testenv.TransferBody(from, to, 1))
			if r.Status == http.StatusCreated && r.Header.Get("Idempotent-Replayed") == "" {
				break
			}
			if r.Status != http.StatusTooManyRequests || time.Now().After(deadline) {
				t.Fatalf("refused transfer %d sent again: %d %s", i, r.Status, r.Body)
			}
			wait, _ := strconv.Atoi(r.Header.Get("Retry-After"))
			time.Sleep(time.Duration(wait) * time.Second)
		}
	}
	if got := env.Balance(t, to); got != n {
		t.Fatalf("destination %d after all %d transfers of 1", got, n)
	}
}

// The processes that write to Temporal or keep secrets refuse to start without the keys that
// seal them: exit 2, saying so.
func TestNoKeysNoStart(t *testing.T) {
	commandsOn(t, env.URL)
	t.Setenv("PAYMENTS_CODEC_KEYS", "")
	t.Setenv("PAYMENTS_BANK_SECRET", testenv.BankSecret)
	for _, args := range [][]string{{"api"}, {"worker"}, {"serve"}, {"deposit", "--account", "acc_x", "--amount-minor", "1"},
		{"rerun", "failed", "--dry-run"}} {
		var usage usageError
		if err := dispatch(context.Background(), args, io.Discard); !errors.As(err, &usage) || !strings.Contains(err.Error(), "PAYMENTS_CODEC_KEYS") {
			t.Errorf("%v without keys: %v, want exit 2 naming PAYMENTS_CODEC_KEYS", args, err)
		}
	}
}

// otherKeyOf issues a second key to the owner of key.
func otherKeyOf(t *testing.T, key string) string {
	t.Helper()
	k, err := auth.Authenticate(context.Background(), env.DB, key)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := env.DB.QueryRow(context.Background(), `SELECT name FROM owners WHERE id = $1`, k.OwnerID).Scan(&name); err != nil {
		t.Fatal(err)
	}
	other, _, err := auth.CreateKey(context.Background(), env.DB, name)
	if err != nil {
		t.Fatal(err)
	}
	return other
}

// counter reads one counter from a Prometheus text page.
func counter(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s not on %s", name, url)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
