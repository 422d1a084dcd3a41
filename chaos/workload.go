package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
)

// Kinds of operation, and how a duplicate is sent.
const (
	kindTransfer  = "transfer"
	kindRefund    = "refund"
	kindPayout    = "payout"
	kindEndpoint  = "endpoint" // a webhook endpoint, created as the run is set up
	kindAuthorize = "authorization"
	kindCapture   = "capture" // of an earlier authorization, by its payee
	kindVoid      = "void"    // likewise
	kindSchedule  = "scheduled-transfer"
	kindCancel    = "cancel" // of an earlier scheduled transfer, by its payer (DELETE)

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
	Ref     int // the earlier operation a refund refunds, a capture or void decides, a cancel cancels, or again and reused repeat; -1 for none
	Owner   int
	Key     string
	Body    string
	Amount  int64 // what the body asks (for a refund left to "all that remains", 0)
	// A scheduled transfer's occurrences and their interval in seconds; its body's start_at is
	// set when it is first sent (startAtHole), so that it is now then.
	Count, Interval int
	From            string // the account the money leaves: a transfer's or payout's source, a refund's payee
	To              string // the account it goes to: a transfer's destination (whose owner may refund it), a refund's payer

	done chan struct{} // closed once every sender has its final answer (or gave up)

	mu          sync.Mutex
	Path        string   // set when sent: a refund's names its transfer, a decision's its authorization, a cancel its schedule
	Target      string   // a refund's transfer, a decision's authorization, a cancel's scheduled transfer
	Answers     []answer // the final answer of each sender
	Attempts    int
	LostAnswers int    // attempts that got no answer (the process died, paused or was cut off)
	Lost        []span // when those attempts were under way
	Skipped     string // why the operation was not sent (what it refers to got no answer)
	Start, End  time.Time
}

// span is when an attempt was under way.
type span struct{ From, To time.Time }

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

// stored is true for an answer the API stores and replays: anything but a refusal decided
// before the claim (a refund's 422 without refund_id, docs/contract.md §8).
func (a answer) stored() bool {
	return !(a.Status == http.StatusUnprocessableEntity && a.field("refund_id") == "" &&
		(a.field("type") == "/problems/refund-exceeds-transfer" || a.field("type") == "/problems/transfer-not-refundable"))
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
	recv   *receiver   // the owners' webhook receiver (nil: no endpoints)
	hooks  []*endpoint // the owners' webhook endpoints at recv

	ops []*op // planned from the seed
}

const (
	owners           = 6
	accountsPerOwner = 2
	initialBalance   = 500_000
)

// setUp creates the owners, then their webhook endpoints (when the run has a receiver), then
// opens the owners' accounts and funds them, straight in the ledger (the deposits are set-up,
// not under test: they run no workflow). The endpoints come before any money moves, so that
// each receives every event of its owner's feed (an endpoint receives what commits after it).
func (w *workload) setUp(ctx context.Context, l *ledger.Ledger) error {
	for i := range owners {
		key, ownerID, err := auth.CreateKey(ctx, l.DB, fmt.Sprintf("chaos-%d", i))
		if err != nil {
			return err
		}
		w.owners = append(w.owners, owner{ID: ownerID, Key: key})
	}
	if w.recv != nil {
		if err := w.createEndpoints(ctx); err != nil {
			return err
		}
	}
	for i := range w.owners {
		o := &w.owners[i]
		for range accountsPerOwner {
			acc, err := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), o.ID, "USD", "chaos", nil)
			if err != nil {
				return err
			}
			scope := idempotency.Scope{OwnerID: o.ID, Route: idempotency.RouteDeposit, Key: "chaos-funding-" + acc.ID}
			if _, _, err := l.Post(ctx, ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(),
				From: money.FundingAccountID("USD"), To: acc.ID, AmountMinor: initialBalance, Currency: "USD", Scope: scope},
				api.TransferAnswer); err != nil {
				return err
			}
			o.Accounts = append(o.Accounts, acc.ID)
		}
	}
	return nil
}

// endpoint is a webhook endpoint of an owner's, at the run's receiver.
type endpoint struct {
	Owner int
	Path  string   // at the receiver
	Types []string // the event types it subscribes to; nil for all ("*")
	Op    *op      // its creation through the API
	ID    string   // from the answer
}

// endpointTypes are what each owner's endpoints subscribe to: everything, and the events that
// move money in or out (so that the run also holds the deliveries to the subscription).
var endpointTypes = [][]string{nil,
	{ledger.EventTransferCompleted, ledger.EventRefundCompleted, ledger.EventPayoutPaid, ledger.EventPayoutReturned}}

// createEndpoints creates each owner's endpoints through the API, as a client does: under an
// Idempotency-Key, sent again until a final answer; the second from three senders at once.
func (w *workload) createEndpoints(ctx context.Context) error {
	for i := range w.owners {
		for n, types := range endpointTypes {
			e := &endpoint{Owner: i, Path: fmt.Sprintf("/hooks/%d/%d", i, n), Types: types}
			subscribed := types
			if subscribed == nil {
				subscribed = []string{"*"}
			}
			body, _ := json.Marshal(map[string]any{"url": w.recv.url + e.Path, "event_types": subscribed})
			e.Op = &op{N: len(w.hooks), Kind: kindEndpoint, Ref: -1, Owner: i, Body: string(body),
				Key: fmt.Sprintf("chaos-%d-endpoint-%d-%d", w.seed, i, n), done: make(chan struct{})}
			if n == 1 {
				e.Op.Variant = concurrent
			}
			w.recv.expect(e.Path)
			w.run(ctx, e.Op)
			if len(e.Op.Answers) == 0 || e.Op.Answers[0].Status != http.StatusCreated {
				return fmt.Errorf("creating webhook endpoint %s of owner %d: %v", e.Path, i, e.Op.Answers)
			}
			a := e.Op.Answers[0]
			e.ID = a.field("id")
			w.recv.register(e.Path, a.field("secret"))
			w.hooks = append(w.hooks, e)
		}
	}
	return nil
}

// plan draws the n operations from the seed, all before the first is sent, so that the seed
// fixes them: kinds, keys, amounts, accounts, and which earlier operation a refund refunds or a
// duplicate repeats (it is sent once that one has its answer).
func (w *workload) plan(n int) {
	rng := rand.New(rand.NewPCG(w.seed, 0x0b5))
	for i := range n {
		w.ops = append(w.ops, w.draw(rng, i))
	}
}

func (w *workload) draw(rng *rand.Rand, n int) *op {
	o := &op{N: n, Ref: -1, Key: fmt.Sprintf("chaos-%d-%d", w.seed, n), done: make(chan struct{})}
	switch p := rng.IntN(100); {
	case p < 10:
		if earlier := w.earlier(rng, n, kindTransfer, kindPayout, kindAuthorize, kindSchedule); earlier != nil {
			// The same request again after its answer: a 201 or a 422 replayed.
			o.Variant, o.Ref = again, earlier.N
			o.Kind, o.Owner, o.Key, o.Body, o.Amount = earlier.Kind, earlier.Owner, earlier.Key, earlier.Body, earlier.Amount
			o.From, o.To = earlier.From, earlier.To
			return o
		}
	case p < 15:
		if earlier := w.earlier(rng, n, kindTransfer, kindPayout); earlier != nil {
			o.Variant, o.Ref = reused, earlier.N
			o.Kind, o.Owner, o.Key = earlier.Kind, earlier.Owner, earlier.Key
			o.Amount = earlier.Amount + 1
			o.Body = w.body(rng, o)
			return o
		}
	}
	if rng.IntN(100) < 15 {
		o.Variant = concurrent
	}
	switch p := rng.IntN(100); {
	case p < 20:
		if t := w.earlier(rng, n, kindTransfer); t != nil {
			// A refund gives the transfer's money back: from its payee to its payer.
			o.Kind, o.Ref, o.Owner, o.From, o.To = kindRefund, t.N, w.ownerOf(t.To), t.To, t.From
			if rng.IntN(2) == 0 {
				o.Amount = 1 + rng.Int64N(t.Amount)
			}
			o.Body = w.body(rng, o)
			return o
		}
		fallthrough
	case p < 35:
		o.Kind, o.Owner = kindPayout, rng.IntN(owners)
		o.Amount = 1 + rng.Int64N(20_000)
	case p < 45:
		if a := w.earlier(rng, n, kindAuthorize); a != nil && p < 42 {
			// The payee decides: a capture (all, or part) or a void, racing the expiry.
			o.Kind, o.Ref, o.Owner, o.From, o.To = kindVoid, a.N, w.ownerOf(a.To), a.From, a.To
			if rng.IntN(2) > 0 {
				o.Kind = kindCapture
				if rng.IntN(2) == 0 {
					o.Amount = 1 + rng.Int64N(a.Amount)
				}
			}
			o.Body = w.body(rng, o)
			return o
		}
		o.Kind, o.Owner = kindAuthorize, rng.IntN(owners)
		o.Amount = 1 + rng.Int64N(30_000)
	case p < 55:
		if st := w.earlier(rng, n, kindSchedule); st != nil && p < 50 {
			// Its payer cancels it, racing its occurrences.
			o.Kind, o.Ref, o.Owner, o.From, o.To = kindCancel, st.N, st.Owner, st.From, st.To
			return o
		}
		// Two to four occurrences a second or three apart, from when it is sent, each an
		// ordinary transfer racing the faults (a worker killed between two, Temporal down
		// across one); now and then more than is left: an occurrence rejected.
		o.Kind, o.Owner = kindSchedule, rng.IntN(owners)
		o.Amount, o.Count, o.Interval = 1+rng.Int64N(40_000), 2+rng.IntN(3), 1+rng.IntN(3)
	default:
		o.Kind, o.Owner = kindTransfer, rng.IntN(owners)
		o.Amount = 1 + rng.Int64N(60_000) // now and then more than is left: insufficient-funds
	}
	o.Body = w.body(rng, o)
	return o
}

// earlier is an earlier operation of one of kinds, sent as itself (not a repeat), or nil.
func (w *workload) earlier(rng *rand.Rand, n int, kinds ...string) *op {
	if n == 0 {
		return nil
	}
	for range 5 {
		o := w.ops[rng.IntN(n)]
		if (o.Variant == plain || o.Variant == concurrent) && slices.Contains(kinds, o.Kind) {
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
	case kindRefund: // its accounts are its transfer's (draw)
		if o.Amount == 0 {
			return `{"description":"chaos"}`
		}
		return fmt.Sprintf(`{"amount_minor":%d}`, o.Amount)
	case kindCapture, kindVoid:
		if o.Amount == 0 {
			return `{}`
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
		o.From = from
		return fmt.Sprintf(`{"account_id":%q,"amount_minor":%d,"currency":"USD","destination":{"account_number":%q,"bank_code":"BANKUS33"},"metadata":{"op":"%d"}}`,
			from, o.Amount, number, o.N)
	default:
		var to string
		for to == "" || to == from {
			other := w.owners[rng.IntN(owners)].Accounts
			to = other[rng.IntN(len(other))]
		}
		o.From, o.To = from, to
		if o.Kind == kindSchedule {
			return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD","start_at":%q,"interval":"%ds","count":%d}`,
				from, to, o.Amount, startAtHole, o.Interval, o.Count)
		}
		if o.Kind == kindAuthorize { // expiring within the run, before its drain, some before their payee decides
			return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD","expires_in":"%ds"}`,
				from, to, o.Amount, 2+rng.IntN(20))
		}
		return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD"}`, from, to, o.Amount)
	}
}

// run sends o as a well-behaved client does: the same request, under the same key, again after
// a timeout, a dropped connection, a 202, a 409, a 500 or a 503, until a final answer. An
// operation that refers to an earlier one waits for that one's answer first.
func (w *workload) run(ctx context.Context, o *op) {
	defer close(o.done)
	if o.Ref >= 0 {
		ref := w.ops[o.Ref]
		<-ref.done
		if len(ref.Answers) == 0 {
			o.Skipped = fmt.Sprintf("operation %d got no answer", ref.N)
			return
		}
		switch o.Kind {
		case kindRefund:
			// Its transfer's id, whether it completed (201) or was rejected (422): a refund of a
			// rejected one is transfer-not-refundable.
			o.Target = cmp.Or(ref.Answers[0].field("id"), ref.Answers[0].field("transfer_id"))
			o.Path = "/v1/transfers/" + o.Target + "/refunds"
		case kindCapture, kindVoid:
			o.Target = cmp.Or(ref.Answers[0].field("id"), ref.Answers[0].field("authorization_id"))
			o.Path = "/v1/authorizations/" + o.Target + "/" + o.Kind
		case kindCancel:
			o.Target = ref.Answers[0].field("id")
			o.Path = "/v1/scheduled-transfers/" + o.Target
		default:
			o.Path = ref.path()
			if o.Variant == again {
				o.Body = ref.Body // as sent: a scheduled transfer's with its start_at
			}
		}
	} else {
		o.Path = o.path()
		// start_at is now when it is first sent: the same body is then sent again as it is.
		o.Body = strings.Replace(o.Body, startAtHole, time.Now().UTC().Format(time.RFC3339Nano), 1)
	}
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
}

// path is where o is sent, for a transfer or a payout.
func (o *op) path() string {
	switch o.Kind {
	case kindPayout:
		return "/v1/payouts"
	case kindEndpoint:
		return "/v1/webhook-endpoints"
	case kindAuthorize:
		return "/v1/authorizations"
	case kindSchedule:
		return "/v1/scheduled-transfers"
	}
	return "/v1/transfers"
}

// startAtHole stands for a scheduled transfer's start_at in its planned body until it is sent.
const startAtHole = "START_AT"

// finalGiveUp bounds how long a client keeps asking: far past every fault and drain.
const finalGiveUp = 10 * time.Minute

func (w *workload) send(ctx context.Context, o *op, sender int) (answer, bool) {
	deadline := time.Now().Add(finalGiveUp)
	for attempt := 0; time.Now().Before(deadline) && ctx.Err() == nil; attempt++ {
		api := w.apis[(o.N+sender+attempt)%len(w.apis)]
		sent := time.Now()
		a, err := w.post(ctx, api, o)
		o.mu.Lock()
		o.Attempts++
		if err != nil {
			o.LostAnswers++
			o.Lost = append(o.Lost, span{sent, time.Now()})
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
	method := http.MethodPost
	if o.Kind == kindCancel {
		method = http.MethodDelete
	}
	req, err := http.NewRequestWithContext(ctx, method, api+o.Path, strings.NewReader(o.Body))
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
