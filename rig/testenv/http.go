package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/ledger"
)

// Owner issues a new API key for a new owner and returns (owner id, key).
func (e *Env) Owner(t testing.TB) (string, string) {
	t.Helper()
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	key, id, err := auth.CreateKey(context.Background(), e.DB, name)
	if err != nil {
		t.Fatal(err)
	}
	return id, key
}

// SecondKey issues another API key, with scopes (the default ones when none), for the owner
// ownerID, and returns (its id, the key).
func (e *Env) SecondKey(t testing.TB, ownerID string, scopes ...auth.Scope) (string, string) {
	t.Helper()
	ctx := context.Background()
	var name string
	if err := e.DB.QueryRow(ctx, `SELECT name FROM owners WHERE id = $1`, ownerID).Scan(&name); err != nil {
		t.Fatal(err)
	}
	key, _, err := auth.CreateKey(ctx, e.DB, name, scopes...)
	if err != nil {
		t.Fatal(err)
	}
	return e.KeyID(t, key), key
}

// KeyID is the id of API key key.
func (e *Env) KeyID(t testing.TB, key string) string {
	t.Helper()
	k, err := auth.Authenticate(context.Background(), e.DB, key)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// Response is an HTTP answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, r.Body)
	}
	return m
}

// Request builds a request to the API with the API key (when not empty) and a JSON body.
func (e *Env) Request(t testing.TB, method, path, apiKey, body string) *http.Request {
	t.Helper()
	return RequestAt(e.Server.URL, method, path, apiKey, body)
}

// RequestAt is Request to the API at base (a `payments api` process, say).
func RequestAt(base, method, path, apiKey, body string) *http.Request {
	req, err := http.NewRequest(method, base+path, bytes.NewReader([]byte(body)))
	if err != nil {
		panic(err) // a malformed path in the test itself
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// Send sends req and reads the whole answer. A transport error fails t and returns a Response
// with Status 0; Send does not stop the test, so that goroutines may call it.
func Send(t testing.TB, req *http.Request) Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
		return Response{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Do sends one request with the API key and, when idemKey is not empty, an Idempotency-Key.
func (e *Env) Do(t testing.TB, method, path, apiKey, idemKey, body string) Response {
	t.Helper()
	return DoAt(t, e.Server.URL, method, path, apiKey, idemKey, body)
}

// DoAt is Do to the API at base.
func DoAt(t testing.TB, base, method, path, apiKey, idemKey, body string) Response {
	t.Helper()
	req := RequestAt(base, method, path, apiKey, body)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	return Send(t, req)
}

// Account opens an account through the API and returns its id.
func (e *Env) Account(t testing.TB, apiKey, currency string) string {
	t.Helper()
	r := e.Do(t, "POST", "/v1/accounts", apiKey, fmt.Sprintf("acc-%d", time.Now().UnixNano()), `{"currency":"`+currency+`"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("open account: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

// Fund deposits amount into account from its currency's funding account, as `payments deposit`
// does (through the transfer workflow), for tests that need a starting balance.
func (e *Env) Fund(t testing.TB, account string, amount int64) {
	t.Helper()
	answer, err := e.Transfers.Deposit(context.Background(), account, amount, ledger.NewID("fund-"))
	if err != nil || answer.Status != http.StatusCreated {
		t.Fatalf("deposit: %v %s", err, answer.Body)
	}
}

// FundedAccounts opens n USD accounts for apiKey's owner, each funded with amount.
func (e *Env) FundedAccounts(t testing.TB, apiKey string, n int, amount int64) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.Account(t, apiKey, "USD")
		e.Fund(t, ids[i], amount)
	}
	return ids
}

// TransferBody is a POST /v1/transfers body in USD, described as rent.
func TransferBody(from, to string, amount int64) string {
	return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD","description":"rent"}`, from, to, amount)
}

// Pair picks two distinct indexes below n.
func Pair(rng *rand.Rand, n int) (int, int) {
	a, b := rng.IntN(n), rng.IntN(n-1)
	if b >= a {
		b++
	}
	return a, b
}

// HasEvent reports whether apiKey's events feed holds an event of typ about object (among the
// newest 200 of that type).
func (e *Env) HasEvent(t testing.TB, apiKey, typ, object string) bool {
	t.Helper()
	r := e.Do(t, "GET", "/v1/events?limit=200&type="+typ, apiKey, "", "")
	var page struct {
		Data []struct {
			Data struct {
				Object struct {
					ID string `json:"id"`
				} `json:"object"`
			} `json:"data"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Data {
		if ev.Data.Object.ID == object {
			return true
		}
	}
	return false
}
