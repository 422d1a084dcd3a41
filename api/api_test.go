package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/rig/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, "payments_test_api", testenv.Options{})
}

func TestTransferMovesMoneyOnceAndDuplicateReplays(t *testing.T) {
	bothShapes(t, func(t *testing.T, split bool) {
		testTransferMovesMoneyOnceAndDuplicateReplays(t, env.With(t, testenv.Options{Split: split}), split)
	})
}

func testTransferMovesMoneyOnceAndDuplicateReplays(t *testing.T, api *testenv.Env, split bool) {
	ownerID, key, from, to := fundedPair(t, 10_000)

	first := api.Do(t, "POST", "/v1/transfers", key, "order-1", testenv.TransferBody(from, to, 2_500))
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	tr := first.JSON(t)
	wantWorkflow := "transfer/" + ownerID + "/order-1"
	if tr["status"] != "completed" || tr["workflow_id"] != wantWorkflow || first.Header.Get("Location") != "/v1/transfers/"+tr["id"].(string) {
		t.Fatalf("unexpected transfer %s (Location %q)", first.Body, first.Header.Get("Location"))
	}
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a first answer must not say it is replayed")
	}

	// Same key, same body with keys in another order and other spacing: a replay.
	reordered := fmt.Sprintf(`{ "currency":"USD", "amount_minor": 2500, "to_account_id":%q, "from_account_id":%q, "description":"rent" }`, to, from)
	dup := api.Do(t, "POST", "/v1/transfers", key, "order-1", reordered)
	if dup.Status != first.Status || string(dup.Body) != string(first.Body) ||
		dup.Header.Get("Location") != first.Header.Get("Location") || dup.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
		t.Fatalf("replay differs:\nfirst %d %s\nreplay %d %s", first.Status, first.Body, dup.Status, dup.Body)
	}
	if dup.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay must carry Idempotent-Replayed: true")
	}

	// The money moved once.
	if got := env.Balance(t, from); got != 7_500 {
		t.Fatalf("source balance %d, want 7500", got)
	}
	if got := env.Balance(t, to); got != 2_500 {
		t.Fatalf("destination balance %d, want 2500", got)
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1`, tr["id"]); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	if n := env.Count(t, `SELECT count(*) FROM transfers WHERE from_account_id = $1`, from); n != 1 {
		t.Fatalf("%d transfers leave the source, want 1", n)
	}

	// The workflow is there in Temporal, completed, under the documented ID.
	if st := env.Settled(t, wantWorkflow); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("workflow status %v", st)
	}
	// Without a worker in its process, the API had its answer from the run's update; with one,
	// from the posting in its process, and the run carries no update.
	if n, want := env.AnswerUpdates(t, wantWorkflow), map[bool]int{true: 1, false: 0}[split]; n != want {
		t.Fatalf("%d answer updates in the run, want %d", n, want)
	}

	// GET shows the same transfer.
	got := env.Do(t, "GET", "/v1/transfers/"+tr["id"].(string), key, "", "")
	if got.Status != http.StatusOK || got.JSON(t)["status"] != "completed" {
		t.Fatalf("GET: %d %s", got.Status, got.Body)
	}
}

func TestInsufficientFundsIsAStoredRejection(t *testing.T) {
	_, key, from, to := fundedPair(t, 100)

	first := env.Do(t, "POST", "/v1/transfers", key, "too-much", testenv.TransferBody(from, to, 101))
	p := first.JSON(t)
	if first.Status != http.StatusUnprocessableEntity || p["type"] != "/problems/insufficient-funds" || p["transfer_id"] == nil ||
		!strings.HasPrefix(first.Header.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("got %d %s", first.Status, first.Body)
	}
	again := env.Do(t, "POST", "/v1/transfers", key, "too-much", testenv.TransferBody(from, to, 101))
	if again.Status != first.Status || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("rejection not replayed: %d %s", again.Status, again.Body)
	}
	tr := env.Do(t, "GET", "/v1/transfers/"+p["transfer_id"].(string), key, "", "").JSON(t)
	if tr["status"] != "rejected" {
		t.Fatalf("transfer status %v, want rejected", tr["status"])
	}
	if env.Balance(t, from) != 100 || env.Balance(t, to) != 0 {
		t.Fatal("a rejected transfer moved money")
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1`, p["transfer_id"]); n != 0 {
		t.Fatalf("a rejected transfer has %d entries", n)
	}
	// The workflow completed (a business outcome), it did not fail.
	if st := env.Settled(t, tr["workflow_id"].(string)); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("workflow status %v", st)
	}
}

func TestKeyReusedWithAnotherBodyExecutesNothing(t *testing.T) {
	_, key, from, to := fundedPair(t, 1_000)
	first := env.Do(t, "POST", "/v1/transfers", key, "k", testenv.TransferBody(from, to, 100))
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	other := env.Do(t, "POST", "/v1/transfers", key, "k", testenv.TransferBody(from, to, 200))
	if other.Status != http.StatusUnprocessableEntity || other.JSON(t)["type"] != "/problems/idempotency-key-reused" {
		t.Fatalf("got %d %s", other.Status, other.Body)
	}
	if env.Balance(t, from) != 900 || env.Balance(t, to) != 100 {
		t.Fatal("the reused key moved money")
	}
	again := env.Do(t, "POST", "/v1/transfers", key, "k", testenv.TransferBody(from, to, 100))
	if string(again.Body) != string(first.Body) {
		t.Fatal("the original no longer replays")
	}
}

func TestOwnersAreIsolated(t *testing.T) {
	_, alice := env.Owner(t)
	_, mallory := env.Owner(t)
	a1 := env.Account(t, alice, "USD")
	m1 := env.Account(t, mallory, "USD")
	env.Fund(t, a1, 1_000)

	if r := env.Do(t, "GET", "/v1/accounts/"+a1, mallory, "", ""); r.Status != http.StatusNotFound {
		t.Fatalf("another owner's account: %d", r.Status)
	}
	// Mallory cannot spend from Alice's account, and learns nothing about it.
	r := env.Do(t, "POST", "/v1/transfers", mallory, "steal", testenv.TransferBody(a1, m1, 500))
	if r.Status != http.StatusNotFound || r.JSON(t)["type"] != "/problems/not-found" {
		t.Fatalf("spending another owner's account: %d %s", r.Status, r.Body)
	}
	if env.Balance(t, a1) != 1_000 {
		t.Fatal("money moved")
	}
	// Alice may pay Mallory; Mallory then sees the transfer, a stranger does not.
	r = env.Do(t, "POST", "/v1/transfers", alice, "pay", testenv.TransferBody(a1, m1, 300))
	if r.Status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	if got := env.Do(t, "GET", "/v1/transfers/"+id, mallory, "", ""); got.Status != http.StatusOK {
		t.Fatalf("recipient cannot see the transfer: %d", got.Status)
	}
	_, stranger := env.Owner(t)
	if got := env.Do(t, "GET", "/v1/transfers/"+id, stranger, "", ""); got.Status != http.StatusNotFound {
		t.Fatalf("stranger sees the transfer: %d", got.Status)
	}
}

func TestUnauthenticated(t *testing.T) {
	for _, key := range []string{"", "pk_not-a-key", "garbage"} {
		r := env.Do(t, "GET", "/v1/accounts", key, "", "")
		if r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" || r.JSON(t)["type"] != "/problems/unauthorized" {
			t.Fatalf("key %q: %d %s", key, r.Status, r.Body)
		}
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	_, key := env.Owner(t)
	from, to := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	eur := env.Account(t, key, "EUR")
	env.Fund(t, from, 1_000)
	cases := []struct {
		name, idem, body string
		status           int
		slug             string
	}{
		{"no key", "", testenv.TransferBody(from, to, 1), 400, "missing-idempotency-key"},
		{"key with space", "a b", testenv.TransferBody(from, to, 1), 400, "invalid-idempotency-key"},
		{"zero", "z", testenv.TransferBody(from, to, 0), 400, "invalid-request"},
		{"too big", "big", testenv.TransferBody(from, to, 1_000_000_000_000_001), 400, "invalid-request"},
		{"float", "f", fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":1.5,"currency":"USD"}`, from, to), 400, "invalid-request"},
		{"string amount", "s", fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":"1","currency":"USD"}`, from, to), 400, "invalid-request"},
		{"same account", "same", testenv.TransferBody(from, from, 1), 400, "invalid-request"},
		{"lower-case currency", "cur", strings.Replace(testenv.TransferBody(from, to, 1), "USD", "usd", 1), 400, "invalid-request"},
		{"unknown field", "uf", strings.Replace(testenv.TransferBody(from, to, 1), `"rent"`, `"rent","memo":"x"`, 1), 400, "invalid-request"},
		{"not json", "nj", `{"from_account_id":`, 400, "invalid-request"},
		{"unknown account", "ua", testenv.TransferBody(from, "acc_nope", 1), 404, "not-found"},
		{"currency mismatch", "cm", testenv.TransferBody(from, eur, 1), 422, "currency-mismatch"},
		{"too large", "tl", `{"description":"` + strings.Repeat("x", 70_000) + `"}`, 413, "payload-too-large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env.Do(t, "POST", "/v1/transfers", key, c.idem, c.body)
			p := r.JSON(t)
			if r.Status != c.status || p["type"] != "/problems/"+c.slug || p["status"] != float64(c.status) {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
		})
	}
	if env.Balance(t, from) != 1_000 || env.Balance(t, to) != 0 || env.Balance(t, eur) != 0 {
		t.Fatal("bad input moved money")
	}
	// Nothing was stored: the same key with a corrected body works.
	r := env.Do(t, "POST", "/v1/transfers", key, "cm", testenv.TransferBody(from, to, 10))
	if r.Status != http.StatusCreated || env.Balance(t, to) != 10 {
		t.Fatalf("corrected body: %d %s", r.Status, r.Body)
	}
}

func TestAccountsAreIdempotent(t *testing.T) {
	_, key := env.Owner(t)
	first := env.Do(t, "POST", "/v1/accounts", key, "open-1", `{"currency":"GBP","name":"Savings"}`)
	again := env.Do(t, "POST", "/v1/accounts", key, "open-1", `{"name":"Savings", "currency":"GBP"}`)
	if first.Status != http.StatusCreated || string(first.Body) != string(again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s / again %d %s", first.Status, first.Body, again.Status, again.Body)
	}
	list := env.Do(t, "GET", "/v1/accounts", key, "", "").JSON(t)
	if n := len(list["data"].([]any)); n != 1 {
		t.Fatalf("%d accounts, want 1", n)
	}
}
