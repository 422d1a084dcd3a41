package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
)

// Kinds of operation, and how a duplicate is sent.
const (
	kindTransfer = "transfer"
	kindRefund   = "refund"
	kindPayout   = "payout"

	plain      = ""           // sent once, retried until a final answer
	concurrent = "concurrent" // the same request from three clients at once
	again      = "again"      // an earlier operation's request, sent again after its final answer
	reused     = "reused"     // an earlier operation's key with another body
)

// op is one operation of the workload and what the clients were answered.
type op struct {
	N       int
	Kind    string
	Variant string
	Of      int // the earlier operation again and reused repeat
	Owner   int
	Key     string
	Path    string
	Body    string
	Amount  int64  // what the body asks (for a refund left to "all that remains", 0)
	Target  string // a refund's transfer

	mu          sync.Mutex
	Answers     []answer // the final answer of each sender
	Attempts    int
	LostAnswers int // attempts that got no answer (the process died, paused or was cut off)
	Start, End  time.Time
}

// answer is an HTTP answer as a client kept it.
type answer struct {
	Status   int
	Body     string
	Replayed bool
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.Status, a.Body) }

// field reads a string field of a JSON answer.
func (a answer) field(name string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(a.Body), &m)
	s, _ := m[name].(string)
	return s
}

// owner is a customer of the run: its API key and its USD accounts.
type owner struct {
	ID, Key  string
	Accounts []string
}

// workload generates operations from the seed and runs them with well-behaved clients.
type workload struct {
	seed   uint64
	apis   []string
	owners []owner
	client *http.Client

	mu        sync.Mutex
	ops       []*op
	completed []*op // transfers answered 201: what refunds refund
}

const (
	owners           = 6
	accountsPerOwner = 2
	initialBalance   = 500_000
)

// setUp opens the owners' accounts and funds them, straight in the ledger (the deposits are
// set-up, not under test: they run no workflow).
func (w *workload) setUp(ctx context.Context, l *ledger.Ledger) error {
	for i := range owners {
		key, ownerID, err := auth.CreateKey(ctx, l.DB, fmt.Sprintf("chaos-%d", i))
		if err != nil {
			return err
		}
		o := owner{ID: ownerID, Key: key}
		for range accountsPerOwner {
			acc, err := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), ownerID, "USD", "chaos", nil)
			if err != nil {
				return err
			}
			scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteDeposit, Key: "chaos-funding-" + acc.ID}
			if _, _, err := l.Post(ctx, ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(),
				From: money.FundingAccountID("USD"), To: acc.ID, AmountMinor: initialBalance, Currency: "USD", Scope: scope},
				func(ledger.Transfer) idempotency.Response { return idempotency.Response{Status: 201} }); err != nil {
				return err
			}
			o.Accounts = append(o.Accounts, acc.ID)
		}
		w.owners = append(w.owners, o)
	}
	return nil
}

// next makes operation n: drawn from its own generator (seed, n), so that the mix, the keys,
// the amounts and the duplicates are the seed's. What a refund refunds and what a duplicate
// repeats are drawn among the operations answered by then.
func (w *workload) next(n int) *op {
	rng := rand.New(rand.NewPCG(w.seed, uint64(n)))
	o := &op{N: n, Key: fmt.Sprintf("chaos-%d-%d", w.seed, n)}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch p := rng.IntN(100); {
	case p < 10 && len(w.ops) > 0:
		if earlier := w.answered(rng, 201); earlier != nil {
			o.Variant, o.Of = again, earlier.N
			o.Kind, o.Owner, o.Key, o.Path, o.Body, o.Amount, o.Target =
				earlier.Kind, earlier.Owner, earlier.Key, earlier.Path, earlier.Body, earlier.Amount, earlier.Target
			return o
		}
	case p < 15 && len(w.ops) > 0:
		if earlier := w.answered(rng, 201); earlier != nil {
			o.Variant, o.Of = reused, earlier.N
			o.Kind, o.Owner, o.Key, o.Path, o.Target = earlier.Kind, earlier.Owner, earlier.Key, earlier.Path, earlier.Target
			o.Amount = earlier.Amount + 1
			o.Body = w.body(rng, o)
			return o
		}
	}
	if rng.IntN(100) < 15 {
		o.Variant = concurrent
	}
	switch p := rng.IntN(100); {
	case p < 20 && len(w.completed) > 0:
		t := w.completed[rng.IntN(len(w.completed))]
		o.Kind, o.Target = kindRefund, t.Answers[0].field("id")
		o.Owner = w.ownerOf(t.Answers[0].field("to_account_id"))
		o.Path = "/v1/transfers/" + o.Target + "/refunds"
		if rng.IntN(2) == 0 {
			o.Amount = 1 + rng.Int64N(t.Amount)
		}
	case p < 40:
		o.Kind, o.Owner, o.Path = kindPayout, rng.IntN(owners), "/v1/payouts"
		o.Amount = 1 + rng.Int64N(20_000)
	default:
		o.Kind, o.Owner, o.Path = kindTransfer, rng.IntN(owners), "/v1/transfers"
		o.Amount = 1 + rng.Int64N(60_000) // now and then more than is left: insufficient-funds
	}
	o.Body = w.body(rng, o)
	return o
}

// answered is an earlier operation whose final answer had status, or nil.
func (w *workload) answered(rng *rand.Rand, status int) *op {
	for range 5 {
		o := w.ops[rng.IntN(len(w.ops))]
		o.mu.Lock()
		ok := len(o.Answers) > 0 && o.Answers[0].Status == status && o.Variant != reused
		o.mu.Unlock()
		if ok {
			return o
		}
	}
	return nil
}

func (w *workload) ownerOf(account string) int {
	for i, o := range w.owners {
		for _, a := range o.Accounts {
			if a == account {
				return i
			}
		}
	}
	return 0
}

// body is o's request body; the accounts are drawn from rng.
func (w *workload) body(rng *rand.Rand, o *op) string {
	own := w.owners[o.Owner].Accounts
	from := own[rng.IntN(len(own))]
	switch o.Kind {
	case kindRefund:
		if o.Amount == 0 {
			return `{"description":"chaos"}`
		}
		return fmt.Sprintf(`{"amount_minor":%d}`, o.Amount)
	case kindPayout:
		// A number ending in 0002 fails at the bank, in 0003 is returned (docs/bank.md).
		number := fmt.Sprintf("%012d", rng.Int64N(1_000_000_000_000))
		switch rng.IntN(20) {
		case 0:
			number = number[:8] + "0002"
		case 1:
			number = number[:8] + "0003"
		}
		return fmt.Sprintf(`{"account_id":%q,"amount_minor":%d,"currency":"USD","destination":{"account_number":%q,"bank_code":"BANKUS33"},"metadata":{"op":"%d"}}`,
			from, o.Amount, number, o.N)
	default:
		var to string
		for to == "" || to == from {
			other := w.owners[rng.IntN(owners)].Accounts
			to = other[rng.IntN(len(other))]
		}
		return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD"}`, from, to, o.Amount)
	}
}

// run sends o as a well-behaved client does: the same request, under the same key, again after
// a timeout, a dropped connection, a 202, a 409, a 500 or a 503, until a final answer.
func (w *workload) run(ctx context.Context, o *op) {
	o.Start = time.Now()
	senders := 1
	if o.Variant == concurrent {
		senders = 3
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			a, ok := w.send(ctx, o, s)
			o.mu.Lock()
			if ok {
				o.Answers = append(o.Answers, a)
			}
			o.mu.Unlock()
		})
	}
	wg.Wait()
	o.End = time.Now()
	if o.Kind == kindTransfer && (o.Variant == plain || o.Variant == concurrent) {
		if len(o.Answers) > 0 && o.Answers[0].Status == http.StatusCreated {
			w.mu.Lock()
			w.completed = append(w.completed, o)
			w.mu.Unlock()
		}
	}
}

// finalGiveUp bounds how long a client keeps asking: far past every fault and drain.
const finalGiveUp = 10 * time.Minute

func (w *workload) send(ctx context.Context, o *op, sender int) (answer, bool) {
	deadline := time.Now().Add(finalGiveUp)
	for attempt := 0; time.Now().Before(deadline) && ctx.Err() == nil; attempt++ {
		api := w.apis[(o.N+sender+attempt)%len(w.apis)]
		a, err := w.post(ctx, api, o)
		o.mu.Lock()
		o.Attempts++
		if err != nil {
			o.LostAnswers++
		}
		o.mu.Unlock()
		if err == nil && final(a.Status) {
			return a, true
		}
		pause := time.Duration(100+50*min(attempt, 10)) * time.Millisecond
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return answer{}, false
}

// final is an answer a client stops at: anything but "later" (202, 409, 5xx).
func final(status int) bool {
	return status != http.StatusAccepted && status != http.StatusConflict && status < 500
}

func (w *workload) post(ctx context.Context, api string, o *op) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+o.Path, strings.NewReader(o.Body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+w.owners[o.Owner].Key)
	req.Header.Set("Idempotency-Key", o.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{Status: resp.StatusCode, Body: string(body), Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}
