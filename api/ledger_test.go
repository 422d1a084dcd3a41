package api_test

// The ledger under concurrent load, end to end through HTTP (a ledger that balances
// under any interleaving). Each test ends with every invariant reconciled.

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/payments/payments/rig/testenv"
)

type transfer struct {
	from, to string
	amount   int64
}

// sendAll posts every transfer under its own key (prefix and its index) with clients concurrent
// clients and returns the answers in the same order.
func sendAll(t *testing.T, apiKey, prefix string, ts []transfer, clients int) []testenv.Response {
	t.Helper()
	answers := make([]testenv.Response, len(ts))
	next := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range next {
				answers[i] = env.Do(t, "POST", "/v1/transfers", apiKey, prefix+fmt.Sprint(i),
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
	answers := sendAll(t, key, "load-", ts, 64)
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
	answers := sendAll(t, key, "load-", ts, 32)
	n := countStatus(answers)
	if n[http.StatusCreated] != 100 || n[http.StatusUnprocessableEntity] != 200 {
		t.Fatalf("answers by status %v, want 100 × 201 and 200 × 422", n)
	}
	for _, a := range answers {
		if a.Status == http.StatusUnprocessableEntity && testenv.ProblemType(t, a) != "insufficient-funds" {
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

// TestRandomTransfersAmongFiftyAccounts sends random transfers among fifty accounts in batches,
// each batch concurrently, and holds every answer, every transfer in the ledger and every
// balance to the test's own model (batchPlan): a system that refuses what the model says must
// complete, or completes what it says must be refused, fails.
func TestRandomTransfersAmongFiftyAccounts(t *testing.T) {
	ownerID, key := env.Owner(t)
	const accounts, start, batches, perBatch = 50, 1_000, 10, 128
	ids := env.FundedAccounts(t, key, accounts, start)
	model := map[string]int64{}
	for _, id := range ids {
		model[id] = start
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var sent []testenv.Sent
	var finals []testenv.Response
	completed, rejected := 0, 0
	for b := range batches {
		plan := newBatchPlan(model)
		for attempts := 0; len(plan.ts) < perBatch && attempts < 100*perBatch; attempts++ {
			from, to := testenv.Pair(rng, accounts)
			plan.add(ids[from], ids[to], plan.amount(rng, ids[from]))
		}
		prefix := fmt.Sprintf("model-%d-", b)
		ts := make([]transfer, len(plan.ts))
		for i, p := range plan.ts {
			ts[i] = p.transfer
			sent = append(sent, testenv.Sent{WorkflowID: "transfer/" + ownerID + "/" + prefix + fmt.Sprint(i),
				From: p.from, To: p.to, Amount: p.amount, Rejected: p.rejected})
			if p.rejected {
				rejected++
			} else {
				completed++
			}
		}
		finals = append(finals, sendAll(t, key, prefix, ts, 32)...)
		model = plan.end()
	}
	// The plan must test both sides: enough transfers that must complete and enough that must be
	// refused (amount makes some of each at the edge, by a single unit).
	if completed < 1_000 || rejected < 200 {
		t.Fatalf("the plan has %d transfers that must complete and %d that must be refused: too few to test", completed, rejected)
	}
	if _, done := env.HeldToAnswers(t, sent, finals); done != completed {
		t.Errorf("%d transfers completed, the model says %d", done, completed)
	}
	var total int64
	for _, id := range ids {
		got := env.Balance(t, id)
		if got != model[id] {
			t.Errorf("account %s: balance %d, the model says %d", id, got, model[id])
		}
		total += got
	}
	if total != accounts*start {
		t.Errorf("balances sum to %d, want %d", total, accounts*start)
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE account_id = ANY($1)`, ids); n != accounts+2*completed {
		t.Errorf("%d entries on the accounts, want %d (their funding and two per completed transfer)", n, accounts+2*completed)
	}
	t.Logf("%d transfers in %d batches: %d must complete, %d must be refused", len(sent), batches, completed, rejected)
	env.Reconcile(t)
}

// planned is a transfer and the outcome its batch's design guarantees.
type planned struct {
	transfer
	rejected bool
}

// batchPlan is a batch of transfers sent concurrently whose outcomes no interleaving can change.
// A transfer must complete if it and the completing transfers from its source before it in the
// batch fit in the source's balance at the batch's start: nothing else in the batch takes money
// from it. It must be refused (insufficient funds) if it exceeds that balance plus all that the
// batch's completing transfers bring the source. A transfer in between could go either way, and
// is not sent; nor is a completing one that would bring an account enough to make one of its
// refusals possible.
type batchPlan struct {
	start           map[string]int64 // the model's balances when the batch is sent
	out, in         map[string]int64 // what the completing transfers take from and bring to each account
	smallestRefusal map[string]int64 // the smallest amount refused from each account
	ts              []planned
}

func newBatchPlan(start map[string]int64) *batchPlan {
	return &batchPlan{start: start, out: map[string]int64{}, in: map[string]int64{}, smallestRefusal: map[string]int64{}}
}

// amount picks an amount to send from from: mostly one that fits in what is left to take, one
// time in sixteen exactly what is left (the last unit must go through), one unit more than
// could ever be there, or more still.
func (b *batchPlan) amount(rng *rand.Rand, from string) int64 {
	left := b.start[from] - b.out[from]
	switch rng.IntN(16) {
	case 0:
		return max(1, left)
	case 1:
		return b.start[from] + b.in[from] + 1
	case 2:
		return b.start[from] + b.in[from] + 1 + rng.Int64N(500)
	}
	return 1 + rng.Int64N(max(1, min(300, left)))
}

// add plans the transfer if its outcome is decided; one that could go either way is dropped.
func (b *batchPlan) add(from, to string, amount int64) {
	switch {
	case b.out[from]+amount <= b.start[from]:
		if r, ok := b.smallestRefusal[to]; ok && r <= b.start[to]+b.in[to]+amount {
			return
		}
		b.out[from] += amount
		b.in[to] += amount
		b.ts = append(b.ts, planned{transfer{from, to, amount}, false})
	case amount > b.start[from]+b.in[from]:
		if r, ok := b.smallestRefusal[from]; !ok || amount < r {
			b.smallestRefusal[from] = amount
		}
		b.ts = append(b.ts, planned{transfer{from, to, amount}, true})
	}
}

// end is the model's balances once the batch has posted.
func (b *batchPlan) end() map[string]int64 {
	after := maps.Clone(b.start)
	for id := range after {
		after[id] += b.in[id] - b.out[id]
	}
	return after
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
