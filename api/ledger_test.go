package api_test

// The ledger under concurrent load, end to end through HTTP (a ledger that balances
// under any interleaving). Each test ends with every invariant reconciled.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/payments/payments/internal/testenv"
)

type transfer struct {
	from, to string
	amount   int64
}

// sendAll posts every transfer under its own key with clients concurrent clients and returns
// the answers in the same order.
func sendAll(t *testing.T, apiKey string, ts []transfer, clients int) []testenv.Response {
	t.Helper()
	answers := make([]testenv.Response, len(ts))
	next := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range next {
				answers[i] = env.Do(t, "POST", "/v1/transfers", apiKey, fmt.Sprintf("load-%d", i),
					testenv.TransferBody(ts[i].from, ts[i].to, ts[i].amount))
			}
		})
	}
	for i := range ts {
		next <- i
	}
	close(next)
	wg.Wait()
	return answers
}

func countStatus(answers []testenv.Response) map[int]int {
	n := map[int]int{}
	for _, a := range answers {
		n[a.Status]++
	}
	return n
}

func TestOppositeTransfersBetweenTwoAccounts(t *testing.T) {
	_, key, a, b := fundedPair(t, 1_000)
	env.Fund(t, b, 1_000)
	var ts []transfer
	for range 500 {
		ts = append(ts, transfer{a, b, 1}, transfer{b, a, 1})
	}
	answers := sendAll(t, key, ts, 64)
	if n := countStatus(answers); n[http.StatusCreated] != 1_000 {
		t.Fatalf("answers by status %v, want 1000 × 201", n)
	}
	if env.Balance(t, a) != 1_000 || env.Balance(t, b) != 1_000 {
		t.Fatalf("balances %d/%d, want both back at 1000", env.Balance(t, a), env.Balance(t, b))
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE account_id = ANY($1)`, []string{a, b}); n != 2_002 {
		t.Fatalf("%d entries, want 2002", n)
	}
	env.Reconcile(t)
}

func TestHotAccountDrainsToExactlyZero(t *testing.T) {
	_, key := env.Owner(t)
	hot := env.Account(t, key, "USD")
	env.Fund(t, hot, 100)
	var sinks []string
	for range 10 {
		sinks = append(sinks, env.Account(t, key, "USD"))
	}
	var ts []transfer
	for i := range 300 {
		ts = append(ts, transfer{hot, sinks[i%len(sinks)], 1})
	}
	answers := sendAll(t, key, ts, 32)
	n := countStatus(answers)
	if n[http.StatusCreated] != 100 || n[http.StatusUnprocessableEntity] != 200 {
		t.Fatalf("answers by status %v, want 100 × 201 and 200 × 422", n)
	}
	for _, a := range answers {
		if a.Status == http.StatusUnprocessableEntity && problemType(t, a) != "insufficient-funds" {
			t.Fatalf("422 %s", a.Body)
		}
	}
	if got := env.Balance(t, hot); got != 0 {
		t.Fatalf("hot account ends at %d, want 0", got)
	}
	var drained int64
	for _, s := range sinks {
		drained += env.Balance(t, s)
	}
	if drained != 100 {
		t.Fatalf("sinks hold %d, want 100", drained)
	}
	env.Reconcile(t) // includes: no entry ever left the hot account below zero
}

func TestRandomTransfersAmongFiftyAccounts(t *testing.T) {
	_, key := env.Owner(t)
	const accounts, start = 50, 1_000
	ids := env.FundedAccounts(t, key, accounts, start)
	want := map[string]int64{}
	for _, id := range ids {
		want[id] = start
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ts []transfer
	for range 1_280 {
		from, to := testenv.Pair(rng, accounts)
		ts = append(ts, transfer{ids[from], ids[to], 1 + rng.Int64N(300)})
	}
	answers := sendAll(t, key, ts, 32)
	for i, a := range answers {
		switch {
		case a.Status == http.StatusCreated:
			want[ts[i].from] -= ts[i].amount
			want[ts[i].to] += ts[i].amount
		case a.Status == http.StatusUnprocessableEntity && problemType(t, a) == "insufficient-funds":
		default:
			t.Fatalf("transfer %d: %d %s", i, a.Status, a.Body)
		}
	}
	var total int64
	for _, id := range ids {
		got := env.Balance(t, id)
		if got != want[id] {
			t.Errorf("account %s: balance %d, the answers add up to %d", id, got, want[id])
		}
		total += got
	}
	if total != accounts*start {
		t.Fatalf("balances sum to %d, want %d", total, accounts*start)
	}
	t.Logf("answers by status: %v", countStatus(answers))
	env.Reconcile(t)
}

func TestEntriesNewestFirstWithAStableCursor(t *testing.T) {
	_, key, a, b := fundedPair(t, 1_000)
	pay := func(amount int64) {
		t.Helper()
		if r := env.Do(t, "POST", "/v1/transfers", key, fmt.Sprintf("e-%d", amount), testenv.TransferBody(a, b, amount)); r.Status != http.StatusCreated {
			t.Fatalf("transfer: %d %s", r.Status, r.Body)
		}
	}
	for _, amount := range []int64{10, 20, 30, 40, 50} {
		pay(amount)
	}
	type entry struct {
		TransferID        string `json:"transfer_id"`
		AmountMinor       int64  `json:"amount_minor"`
		BalanceAfterMinor int64  `json:"balance_after_minor"`
	}
	page := func(cursor string) ([]entry, string) {
		t.Helper()
		path := "/v1/accounts/" + a + "/entries?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := env.Do(t, "GET", path, key, "", "")
		var body struct {
			Data       []entry `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if r.Status != http.StatusOK || decodeJSON(r.Body, &body) != nil {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		next := ""
		if body.NextCursor != nil {
			next = *body.NextCursor
		}
		return body.Data, next
	}
	amounts := func(es []entry) (out []int64) {
		for _, e := range es {
			out = append(out, e.AmountMinor)
		}
		return out
	}

	first, cursor := page("")
	if fmt.Sprint(amounts(first)) != "[-50 -40]" || first[0].BalanceAfterMinor != 850 || first[1].BalanceAfterMinor != 900 || cursor == "" {
		t.Fatalf("first page %+v, cursor %q", first, cursor)
	}
	pay(60) // new entries arrive between pages
	pay(70)
	second, cursor := page(cursor)
	if fmt.Sprint(amounts(second)) != "[-30 -20]" || second[1].BalanceAfterMinor != 970 {
		t.Fatalf("second page %+v", second)
	}
	last, cursor := page(cursor)
	if fmt.Sprint(amounts(last)) != "[-10 1000]" || last[1].BalanceAfterMinor != 1_000 || cursor != "" {
		t.Fatalf("last page %+v, cursor %q", last, cursor)
	}
	if newest, _ := page(""); fmt.Sprint(amounts(newest)) != "[-70 -60]" || newest[0].BalanceAfterMinor != 720 {
		t.Fatalf("newest page %+v", newest)
	}
	for _, q := range []string{"?cursor=bm9wZQ", "?cursor=!!", "?limit=0", "?limit=201", "?limit=x"} {
		if r := env.Do(t, "GET", "/v1/accounts/"+a+"/entries"+q, key, "", ""); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", q, r.Status, r.Body)
		}
	}
	_, stranger := env.Owner(t)
	if r := env.Do(t, "GET", "/v1/accounts/"+a+"/entries", stranger, "", ""); r.Status != http.StatusNotFound {
		t.Errorf("another owner's entries: %d", r.Status)
	}
}

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }
