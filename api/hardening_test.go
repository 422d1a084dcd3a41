package api_test

// The edges an attacker or a careless client tries: ambiguous bodies, values the database cannot store, money
// from the funding accounts, answers that leak, keys with Unicode spaces, slow clients, panics.
// Each test checks the ledger as well as the answer.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/rig/testenv"
)

// records counts the idempotency records of an owner's key on a route.
func records(t *testing.T, ownerID, route, key string) int {
	return env.Count(t, `SELECT count(*) FROM idempotency_records WHERE owner_id = $1 AND route = $2 AND key = $3`, ownerID, route, key)
}

// A body read one way by the fingerprint and another by the handler moved 5 where the
// fingerprint said 100. It is refused now, stores nothing, and the key stays usable.
func TestAmbiguousMemberNamesAreRefused(t *testing.T) {
	ownerID, key, from, to := fundedPair(t, 1_000)
	for i, body := range []string{
		fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":100,"AMOUNT_MINOR":5,"currency":"USD"}`, from, to),
		fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"AMOUNT_MINOR":5,"amount_minor":100,"currency":"USD"}`, from, to),
		fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":100,"amount_minor":5,"currency":"USD"}`, from, to),
		fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount\u005fminor":100,"amount_minor":5,"currency":"USD"}`, from, to),
		fmt.Sprintf(`{"from_account_id":%q,"To_Account_Id":%q,"amount_minor":100,"currency":"USD"}`, from, to),
	} {
		r := env.Do(t, "POST", "/v1/transfers", key, "ambiguous", body)
		if r.Status != http.StatusBadRequest || testenv.ProblemType(t, r) != "invalid-request" {
			t.Fatalf("body %d: %d %s", i, r.Status, r.Body)
		}
	}
	if n := records(t, ownerID, idempotency.RouteTransfers, "ambiguous"); n != 0 {
		t.Fatalf("%d records stored for refused bodies", n)
	}
	moved(t, from, to, 1_000, 0, 0)
	ok := env.Do(t, "POST", "/v1/transfers", key, "ambiguous", testenv.TransferBody(from, to, 100))
	if ok.Status != http.StatusCreated || ok.JSON(t)["amount_minor"] != float64(100) {
		t.Fatalf("the key with a clear body: %d %s", ok.Status, ok.Body)
	}
	moved(t, from, to, 900, 100, 1)
	// The same transfer with its members in another order is the same request: a replay.
	reordered := fmt.Sprintf(`{"description":"rent","currency":"USD","amount_minor":100,"to_account_id":%q,"from_account_id":%q}`, to, from)
	testenv.SameAnswer(t, ok, env.Do(t, "POST", "/v1/transfers", key, "ambiguous", reordered))
	moved(t, from, to, 900, 100, 1)

	acc := env.Do(t, "POST", "/v1/accounts", key, "ambiguous-acc", `{"currency":"EUR","Currency":"GBP"}`)
	if acc.Status != http.StatusBadRequest || records(t, ownerID, idempotency.RouteAccounts, "ambiguous-acc") != 0 {
		t.Fatalf("account body with a case variant: %d %s", acc.Status, acc.Body)
	}
}

// Input PostgreSQL cannot store (a NUL character) is the client's error: 400, or 404 for an id
// that cannot exist; never 503 "retry", nothing stored, and the key works afterwards.
func TestValuesTheDatabaseCannotStoreAreTheClientsError(t *testing.T) {
	ownerID, key, from, to := fundedPair(t, 1_000)
	nul := `a\u0000b`
	for _, c := range []struct {
		name, method, path, idem, body string
		status                         int
	}{
		{"NUL in description", "POST", "/v1/transfers", "nul-1", strings.Replace(testenv.TransferBody(from, to, 10), `"rent"`, `"`+nul+`"`, 1), 400},
		{"NUL in the source id", "POST", "/v1/transfers", "nul-2", testenv.TransferBody(from[:5]+`\u0000`, to, 10), 404},
		{"NUL in the destination id", "POST", "/v1/transfers", "nul-3", testenv.TransferBody(from, `acc_\u0000`, 10), 404},
		{"NUL in an account name", "POST", "/v1/accounts", "nul-4", `{"currency":"USD","name":"` + nul + `"}`, 400},
		{"NUL in a transfer id", "GET", "/v1/transfers/%00", "", "", 404},
		{"NUL in an account id", "GET", "/v1/accounts/acc_%00x", "", "", 404},
		{"NUL in an entries path", "GET", "/v1/accounts/%00/entries", "", "", 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			for range 2 { // the same answer again: nothing changed in between
				r := env.Do(t, c.method, c.path, key, c.idem, c.body)
				if r.Status != c.status || r.Header.Get("Retry-After") != "" {
					t.Fatalf("%d %s (Retry-After %q)", r.Status, r.Body, r.Header.Get("Retry-After"))
				}
			}
		})
	}
	for _, k := range []string{"nul-1", "nul-2", "nul-3"} {
		if n := records(t, ownerID, idempotency.RouteTransfers, k); n != 0 {
			t.Fatalf("%s: %d records", k, n)
		}
	}
	moved(t, from, to, 1_000, 0, 0)
	if r := env.Do(t, "POST", "/v1/transfers", key, "nul-1", testenv.TransferBody(from, to, 10)); r.Status != http.StatusCreated {
		t.Fatalf("the key afterwards: %d %s", r.Status, r.Body)
	}
	moved(t, from, to, 990, 10, 1)
}

// Funding accounts are the ledger's own: no API key acts for their owner, and no customer's
// transfer takes money from or gives money to them.
func TestFundingAccountsAreOutOfReach(t *testing.T) {
	ownerID, key, from, _ := fundedPair(t, 1_000)
	funding := money.FundingAccountID("USD")
	before := env.Balance(t, funding)
	for _, body := range []string{testenv.TransferBody(from, funding, 10), testenv.TransferBody(funding, from, 10)} {
		r := env.Do(t, "POST", "/v1/transfers", key, "funding", body)
		if r.Status != http.StatusNotFound || testenv.ProblemType(t, r) != "not-found" {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
	}
	if _, _, err := auth.CreateKey(context.Background(), env.DB, auth.SystemOwner); err == nil {
		t.Fatal("a key was issued for the system owner")
	}
	// A key issued to the system owner before it was reserved opens nothing.
	const old = "pk_issued_to_system_before_it_was_reserved"
	if _, err := env.DB.Exec(context.Background(), `INSERT INTO api_keys (id, key_hash, owner_id, scopes)
		VALUES ('key_system_before', sha256($1::text::bytea), 'own_system', '{read,transfers}')`, old); err != nil {
		t.Fatal(err)
	}
	r := env.Do(t, "POST", "/v1/transfers", old, "mint", testenv.TransferBody(funding, from, 999_999_999))
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("the system owner's key: %d %s", r.Status, r.Body)
	}
	if env.Balance(t, funding) != before || env.Balance(t, from) != 1_000 || records(t, ownerID, idempotency.RouteTransfers, "funding") != 0 {
		t.Fatal("money moved to or from a funding account")
	}
}

// A currency mismatch on the destination, which may be another owner's account, does not say
// which currency it holds.
func TestCurrencyMismatchDoesNotRevealTheDestinationsCurrency(t *testing.T) {
	_, key, from, _ := fundedPair(t, 1_000)
	_, other := env.Owner(t)
	theirs := env.Account(t, other, "JPY")
	r := env.Do(t, "POST", "/v1/transfers", key, "cm-theirs", testenv.TransferBody(from, theirs, 10))
	if r.Status != http.StatusUnprocessableEntity || testenv.ProblemType(t, r) != "currency-mismatch" || strings.Contains(string(r.Body), "JPY") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	moved(t, from, theirs, 1_000, 0, 0)
}

// A key with a Unicode space after it is not the key without: only HTTP's own whitespace (space,
// tab) is stripped.
func TestKeyWithANoBreakSpaceIsInvalid(t *testing.T) {
	ownerID, key, from, to := fundedPair(t, 1_000)
	for _, k := range []string{"order-1\u00a0", "order-1\u2003"} {
		r := env.Do(t, "POST", "/v1/transfers", key, k, testenv.TransferBody(from, to, 10))
		if r.Status != http.StatusBadRequest || testenv.ProblemType(t, r) != "invalid-idempotency-key" {
			t.Fatalf("%q: %d %s", k, r.Status, r.Body)
		}
	}
	if r := env.Do(t, "POST", "/v1/transfers", key, " order-1\t", testenv.TransferBody(from, to, 10)); r.Status != http.StatusCreated ||
		r.JSON(t)["workflow_id"] != "transfer/"+ownerID+"/order-1" {
		t.Fatalf("a key in HTTP whitespace: %d %s", r.Status, r.Body)
	}
	moved(t, from, to, 990, 10, 1)
}

// /readyz needs no key: it says which dependency is down, never where it is.
func TestReadyzSaysWhatIsDownAndNothingMore(t *testing.T) {
	deadDB, err := pgxpool.New(context.Background(), "postgres://secret_user@127.0.0.1:1/secret_db?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deadDB.Close)
	r := env.With(t, testenv.Options{DB: deadDB}).Do(t, "GET", "/readyz", "", "", "")
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "PostgreSQL") ||
		strings.Contains(string(r.Body), "Temporal unreachable") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	for _, secret := range []string{"127.0.0.1", "secret_user", "secret_db", "dial", "connect"} {
		if strings.Contains(string(r.Body), secret) {
			t.Fatalf("/readyz shows %q: %s", secret, r.Body)
		}
	}
}

// Reads answer 503 with Retry-After when PostgreSQL is down (the caller is authenticated, the
// read fails), and a panic in a handler is a 500 problem for that request alone.
func TestReadsWhilePostgresIsDownAndPanicsAreAnswered(t *testing.T) {
	_, key, from, _ := fundedPair(t, 1_000)
	deadDB, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deadDB.Close)
	serve := func(l *ledger.Ledger) *httptest.Server {
		srv := &api.Server{DB: env.DB, Ledger: l, Transfers: env.Transfers, Temporal: env.Temporal, TTL: time.Hour, Log: testLog(t)}
		s := httptest.NewServer(srv.Handler())
		t.Cleanup(s.Close)
		return s
	}
	down := serve(&ledger.Ledger{DB: deadDB})
	for _, path := range []string{"/v1/accounts", "/v1/accounts/" + from, "/v1/accounts/" + from + "/entries", "/v1/transfers/tr_x"} {
		r := testenv.Send(t, authorized(t, down.URL+path, key))
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || testenv.ProblemType(t, r) != "service-unavailable" {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
	}
	broken := serve(nil) // every read through the ledger panics
	for range 2 {
		r := testenv.Send(t, authorized(t, broken.URL+"/v1/accounts/"+from, key))
		if r.Status != http.StatusInternalServerError || testenv.ProblemType(t, r) != "internal-error" {
			t.Fatalf("a panicking handler: %d %s", r.Status, r.Body)
		}
	}
	if r := testenv.Send(t, authorized(t, broken.URL+"/healthz", "")); r.Status != http.StatusOK {
		t.Fatalf("the server after a panic: %d", r.Status)
	}
}

func authorized(t *testing.T, url, key string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return req
}

// A client that sends its headers a byte at a time, or never finishes them, is cut off by the
// server instead of holding a connection for ever.
func TestSlowClientsAreCutOff(t *testing.T) {
	hs := api.NewHTTPServer(":0", nil, 10*time.Second)
	if hs.ReadHeaderTimeout <= 0 || hs.ReadTimeout <= 0 || hs.IdleTimeout <= 0 || hs.WriteTimeout <= 10*time.Second {
		t.Fatalf("timeouts %+v", hs)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.Server.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/transfers HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server must close the connection (or answer 408) by itself; a deadline bounds the
	// wait so that a server without timeouts fails the test instead of hanging it.
	_ = conn.SetReadDeadline(time.Now().Add(hs.ReadHeaderTimeout + 20*time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	var netErr net.Error
	if ok := err == io.EOF || strings.Contains(line, "408"); !ok {
		if errors.As(err, &netErr) && netErr.Timeout() {
			t.Fatal("the server kept a half-sent request open")
		}
		t.Fatalf("read %q, %v", line, err)
	}
}

// Random requests, valid and not, with random headers and path ids: never a 5xx while
// PostgreSQL and Temporal are up, and a 4xx stores nothing under its key.
func TestRandomRequestsNeverAnswer5xx(t *testing.T) {
	ownerID, key, from, to := fundedPair(t, 1_000_000)
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 300 {
		method, path, idem, body, headers := randomRequest(rng, from, to, i)
		checkOneRequest(t, ownerID, key, method, path, idem, body, headers)
	}
	env.Reconcile(t)
}

func FuzzAPI(f *testing.F) {
	f.Add(uint8(0), "x", "k-1", `{"from_account_id":"FROM","to_account_id":"TO","amount_minor":5,"currency":"USD"}`)
	f.Add(uint8(1), "acc_\x00", "k-2", `{"currency":"EUR","name":"a\u0000"}`)
	f.Add(uint8(2), "%00", "", "")
	f.Add(uint8(3), "FROM", "", "")
	f.Add(uint8(0), "", "\u00a0", `{"amount_minor":1e400}`)
	f.Add(uint8(5), "", "k-3", `{"url":"http://127.0.0.1:9/h","event_types":["*"]}`)
	f.Add(uint8(5), "", "k-4", `{"url":"http://127.0.0.1:9/h","event_types":["transfer.completed","x"]}`)
	f.Add(uint8(6), "evt_x", "2", "transfer.completed")
	f.Add(uint8(7), "MjAyNi0xMi0wMVQwMDowMDowMFogdHJfeA", "2", "completed")
	f.Add(uint8(8), "FROM", "2026-12-01T00:00:00Z", "yesterday")
	f.Add(uint8(9), "PAID", "k-5", `{"amount_minor":5,"metadata":{"a":"b"}}`)
	f.Add(uint8(9), "PAID", "k-6", `{"amount_minor":2000000}`)
	f.Add(uint8(0), "", "k-7", `{"from_account_id":"FROM","to_account_id":"TO","amount_minor":5,"currency":"USD","metadata":{"a":null}}`)
	ownerID, key, from, to, paidID := "", "", "", "", ""
	f.Fuzz(func(t *testing.T, kind uint8, id, idem, body string) {
		if ownerID == "" {
			ownerID, key, from, to = fundedPair(t, 1_000_000)
			paidID = env.Do(t, "POST", "/v1/transfers", key, "fuzz-paid", testenv.TransferBody(from, to, 500_000)).JSON(t)["id"].(string)
		}
		placeholders := strings.NewReplacer("FROM", from, "TO", to, "PAID", paidID)
		body = placeholders.Replace(body)
		id = "i" + placeholders.Replace(id) // a path segment is never empty
		method, path := "POST", "/v1/transfers"
		switch kind % 10 {
		case 9:
			path = "/v1/transfers/" + pathSegment(strings.TrimPrefix(id, "i")) + "/refunds"
		case 1:
			path = "/v1/accounts"
		case 5:
			path = "/v1/webhook-endpoints"
		case 6:
			method, path = "GET", "/v1/events?after="+url.QueryEscape(id)+"&limit="+url.QueryEscape(idem)+"&type="+url.QueryEscape(body)
		case 7:
			method, path = "GET", "/v1/transfers?cursor="+url.QueryEscape(id)+"&limit="+url.QueryEscape(idem)+"&status="+url.QueryEscape(body)
		case 8:
			method, path = "GET", "/v1/payouts?account_id="+url.QueryEscape(id)+"&created_after="+url.QueryEscape(idem)+"&created_before="+url.QueryEscape(body)
		case 2:
			method, path = "GET", "/v1/transfers/"+pathSegment(id)
		case 3:
			method, path = "GET", "/v1/accounts/"+pathSegment(id)
		case 4:
			method, path = "GET", "/v1/accounts/"+pathSegment(id)+"/entries?limit="+url.QueryEscape(idem)+"&cursor="+url.QueryEscape(body)
		}
		if !sendable(idem) {
			t.Skipf("Idempotency-Key %q: no HTTP client sends it (the server would refuse it before the API)", idem)
		}
		checkOneRequest(t, ownerID, key, method, path, idem, body, nil)
	})
}

// sendable says whether an HTTP client sends v as a header value: no control character but the
// tab (RFC 9110 §5.5, as net/http checks it on both sides).
func sendable(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f })
}

// pathSegment escapes s for a URL path, as any client would have to.
func pathSegment(s string) string { return url.PathEscape(s) }

func testLog(*testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// checkOneRequest sends one request and holds the two properties. The request must be one an
// HTTP client sends (see sendable): one that could not be sent checks nothing, and fails t.
func checkOneRequest(t *testing.T, ownerID, key, method, path, idem, body string, headers map[string]string) {
	t.Helper()
	req, err := http.NewRequest(method, env.Server.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s %s: not a request: %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if idem != "" {
		req.Header["Idempotency-Key"] = []string{idem}
	}
	for k, v := range headers {
		req.Header[k] = []string{v}
	}
	route := idempotency.RouteTransfers
	if strings.HasPrefix(path, "/v1/accounts") {
		route = idempotency.RouteAccounts
	}
	if strings.HasPrefix(path, "/v1/webhook-endpoints") {
		route = idempotency.RouteEndpoints
	}
	if strings.HasSuffix(path, "/refunds") {
		route = idempotency.RouteRefunds
	}
	parsed, keyErr := idempotency.ParseKey(req.Header.Values("Idempotency-Key"))
	before := 0
	if keyErr == nil {
		before = records(t, ownerID, route, parsed)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s (key %q, headers %q) was not sent: %v", method, path, idem, headers, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s (key %q) %q: reading the answer: %v", method, path, idem, body, err)
	}
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s (key %q) %q: %d %s", method, path, idem, body, resp.StatusCode, b)
	}
	// A refusal in the ledger (a transfer or a refund rejected there) is a final answer, stored.
	decidedInLedger := strings.Contains(string(b), `"transfer_id"`) && strings.Contains(string(b), "/problems/insufficient-funds") ||
		strings.Contains(string(b), `"refund_id"`)
	if method == "POST" && resp.StatusCode >= 400 && keyErr == nil && !decidedInLedger {
		if after := records(t, ownerID, route, parsed); after != before {
			t.Fatalf("%s %s (key %q) %q: %d stored a record", method, path, idem, body, resp.StatusCode)
		}
	}
}

// randomRequest is a request that is mostly valid with one thing broken, or random throughout.
func randomRequest(rng *rand.Rand, from, to string, i int) (method, path, idem, body string, headers map[string]string) {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	junk := func() string {
		b := make([]byte, rng.IntN(12))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		return string(b)
	}
	// Junk a client can put in a header: any byte but the control characters HTTP forbids there.
	headerJunk := func() string {
		b := []byte(junk())
		for j := range b {
			if !sendable(string(b[j : j+1])) {
				b[j] = '?'
			}
		}
		return string(b)
	}
	idem = pick(fmt.Sprintf("fuzz-%d", i), fmt.Sprintf("fuzz-%d", i%7), "", headerJunk(), "\u00a0k", `"quoted"`, strings.Repeat("k", 256))
	amount := pick("1", "0", "-1", "1e2", "1.5", `"5"`, "null", "99999999999999999999", fmt.Sprint(rng.IntN(500)))
	desc := pick("rent", "a\\u0000b", junk(), strings.Repeat("é", 141), "<script>", `\ud800`)
	names := []string{"from_account_id", "to_account_id", "amount_minor", "currency", "description"}
	if rng.IntN(4) == 0 {
		names[rng.IntN(len(names))] = pick("FROM_ACCOUNT_ID", "Amount_Minor", "memo", "amount_minor", "")
	}
	values := []string{fmt.Sprintf("%q", pick(from, to, "acc_nope", from+"\\u0000", "")), fmt.Sprintf("%q", pick(to, from, "acc_x")),
		amount, fmt.Sprintf("%q", pick("USD", "EUR", "usd", "")), fmt.Sprintf("%q", desc)}
	var members []string
	for j, n := range names {
		members = append(members, fmt.Sprintf("%q:%s", n, values[j]))
	}
	body = "{" + strings.Join(members, ",") + "}"
	if rng.IntN(6) == 0 {
		body = pick(junk(), "", "[]", "null", `{"a":`, body+body, `{"currency":"EUR","name":"`+junk()+`"}`)
	}
	method, path = "POST", "/v1/transfers"
	switch rng.IntN(6) {
	case 0:
		path, body = "/v1/accounts", pick(`{"currency":"EUR"}`, `{"currency":"EUR","name":"a\u0000"}`, body)
	case 1:
		method, path, body = "GET", "/v1/transfers/"+pathSegment(pick("t"+junk(), "tr_x", "\x00")), ""
	case 2:
		method, path, body = "GET", "/v1/accounts/"+pathSegment(pick(from, "a"+junk(), "\x00"))+"/entries?limit="+pick("0", "1", "x", "201")+"&cursor="+url.QueryEscape(junk()), ""
	}
	headers = map[string]string{}
	if rng.IntN(5) == 0 {
		headers["Content-Type"] = pick("text/plain", headerJunk(), "application/json; charset=latin1")
	}
	return method, path, idem, body, headers
}

// The status the search attribute shows is the ledger's, after an operator terminated a run
// whose posting then committed: the client is answered with the transfer, not "moved no money".
func TestTerminatedRunWhosePostingCommittedAnswersTheTransfer(t *testing.T) {
	ownerID, key, from, to := fundedPair(t, 1_000)
	release := env.Hold(t, from)
	body := testenv.TransferBody(from, to, 300)
	first := make(chan testenv.Response, 1)
	go func() { first <- env.Do(t, "POST", "/v1/transfers", key, "terminated", body) }()
	testenv.WaitFor(t, "the posting to wait for the held account", func() bool { return env.Waiting(t) > 0 })
	wf := "transfer/" + ownerID + "/terminated"
	if err := env.Temporal.TerminateWorkflow(context.Background(), wf, "", "operator"); err != nil {
		t.Fatal(err)
	}
	release() // the posting under way goes through: the money moves
	r := <-first
	if r.Status != http.StatusCreated || r.JSON(t)["status"] != "completed" {
		t.Fatalf("answer after the terminate: %d %s", r.Status, r.Body)
	}
	testenv.SameAnswer(t, r, env.Do(t, "POST", "/v1/transfers", key, "terminated", body))
	moved(t, from, to, 700, 300, 1)
	if st := env.Settled(t, wf); st != enums.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("workflow %v", st)
	}
}

// A client that stalls inside a transaction holding a lock on an account does not hold up the
// account's transfers for long (contract §10): PostgreSQL ends the stalled session after its
// idle timeout (here shortened through the URL, as DATABASE_URL may), and the transfer sent
// through the API meanwhile completes, well before PAYMENTS_SYNC_WAIT.
func TestATransferIsNotHeldByAStalledTransaction(t *testing.T) {
	_, key, from, to := fundedPair(t, 1_000)
	ctx := context.Background()
	stalled, err := pgxpool.New(ctx, env.URL+"&idle_in_transaction_session_timeout=500ms")
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	tx, err := stalled.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, from); err != nil {
		t.Fatal(err)
	}
	r := env.Do(t, "POST", "/v1/transfers", key, t.Name(), testenv.TransferBody(from, to, 300))
	if r.Status != http.StatusCreated || r.JSON(t)["status"] != "completed" {
		t.Fatalf("the transfer behind a stalled transaction: %d %s", r.Status, r.Body)
	}
	moved(t, from, to, 700, 300, 1)
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the stalled transaction committed after its session was ended")
	}
}
