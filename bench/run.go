package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/payments/payments/api"
	"github.com/payments/payments/app"
	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// Target is the running system: its HTTP API, and the PostgreSQL and Temporal it uses.
type Target struct {
	API       string
	DB        *pgxpool.Pool
	Temporal  client.Client
	Converter converter.DataConverter // Temporal's (app.Settings.Converter)
}

// Results is one run, as printed and as written to JSON for comparison between runs.
type Results struct {
	Time          time.Time          `json:"time"`
	Machine       string             `json:"machine"`
	Topology      string             `json:"topology"`
	Phases        []Phase            `json:"phases"`
	HistoryEvents map[string]int     `json:"history_events"`
	Targets       []Check            `json:"targets"`
	PeakRSSMiB    map[string]float64 `json:"peak_rss_mib,omitempty"`
}

// Check is one target this benchmark holds the system to, met or not.
type Check struct {
	Name  string  `json:"name"`
	Ratio float64 `json:"ratio"`
	Want  string  `json:"want"`
	Met   bool    `json:"met"`
}

type run struct {
	cfg       Config
	t         Target
	ledger    *ledger.Ledger
	http      *http.Client
	ownerID   string
	key       string
	spread    []string
	hot       string
	replays   []string // bodies of completed transfers, sent again under their keys
	replayKey []string
	id        string // distinguishes this run's idempotency keys and workflow IDs
}

// Run sets up an owner with funded accounts, then measures every scenario.
func Run(ctx context.Context, cfg Config, t Target) (Results, error) {
	r := &run{cfg: cfg, t: t, ledger: &ledger.Ledger{DB: t.DB}, id: fmt.Sprint(time.Now().UnixMilli()),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients * 2}}}
	w, err := startWorker(t.Temporal, r.ledger)
	if err != nil {
		return Results{}, err
	}
	defer w.Stop()
	if err := r.setup(ctx); err != nil {
		return Results{}, fmt.Errorf("setting up accounts: %w", err)
	}
	res := Results{Time: time.Now().UTC(), Machine: fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
		Topology: cfg.Topology, HistoryEvents: map[string]int{}}
	// Payouts last: each goes on after its answer (the bank's instruction, its callback, a
	// return window's timer), and that work would weigh on whatever phase came after it.
	for _, payouts := range []bool{false, true} {
		if seq := r.scenarios(true, payouts); cfg.Sequential > 0 && len(seq) > 0 {
			fmt.Fprintf(cfg.Progress, "==> One client, %s each\n", cfg.Sequential)
			for _, s := range seq {
				res.Phases = append(res.Phases, measure(ctx, cfg, s.name, 1, cfg.Sequential, s.op))
			}
		}
		if many := r.scenarios(false, payouts); len(many) > 0 {
			fmt.Fprintf(cfg.Progress, "==> %d clients, %s each\n", cfg.Clients, cfg.Duration)
			for _, s := range many {
				res.Phases = append(res.Phases, measure(ctx, cfg, s.name, cfg.Clients, cfg.Duration, s.op))
			}
		}
	}
	res.HistoryEvents["transfer"] = r.events(ctx, "transfer/"+r.ownerID+"/"+r.replayKey[0])
	if len(cfg.Only) == 0 {
		res.HistoryEvents["tutorial"] = r.events(ctx, "bench-tutorial-"+r.id+"-1-0-0")
		res.HistoryEvents["empty (eager)"] = r.events(ctx, "bench-empty-"+r.id+"-1-0-0")
		res.HistoryEvents["empty (update-with-start)"] = r.events(ctx, "bench-uws-"+r.id+"-1-0-0")
	}
	res.Targets = checks(res.Phases, cfg.Topology)
	return res, ctx.Err()
}

type scenario struct {
	id, name string
	op       op
}

// Scenario names, as the table prints them.
const (
	NewSpread = "new, spread"
	NewHot    = "new, one hot account"
	NewPayout = "payout, new"
	Replay    = "replay"
	LedgerOne = "baseline: posting only"
	Empty     = "baseline: empty eager"
	Started   = "baseline: empty started"
	UWS       = "baseline: empty update-with-start"
	Tutorial  = "baseline: tutorial"
)

// scenarios are those of the run, for one client or many, the payouts' or the others.
func (r *run) scenarios(sequential, payouts bool) []scenario {
	phase := map[bool]string{true: "1", false: "n"}[sequential]
	all := []scenario{
		{"spread", NewSpread, r.transfer(phase+"s", func(rng *rand.Rand) (string, string) {
			a, b := pick(rng, len(r.spread))
			return r.spread[a], r.spread[b]
		})},
		{"hot", NewHot, r.transfer(phase+"h", func(rng *rand.Rand) (string, string) { return r.hot, r.spread[rng.IntN(len(r.spread))] })},
		{"payout", NewPayout, r.payout(phase)},
		{"replay", Replay, r.replay},
		{"posting", LedgerOne, r.postingOnly(phase)},
		{"empty", Empty, r.emptyWorkflow(phase, true)},
		{"started", Started, r.emptyWorkflow(phase, false)},
		{"uws", UWS, r.updateWithStart(phase)},
		{"tutorial", Tutorial, r.tutorial(phase)},
	}
	var chosen []scenario
	for _, s := range all {
		if (len(r.cfg.Only) == 0 || slices.Contains(r.cfg.Only, s.id)) && !(sequential && s.id == "hot") && (s.id == "payout") == payouts {
			chosen = append(chosen, s) // the hot account needs concurrency to mean anything
		}
	}
	return chosen
}

func (r *run) setup(ctx context.Context) error {
	var err error
	if r.key, r.ownerID, err = auth.CreateKey(ctx, r.t.DB, "bench-"+r.id); err != nil {
		return err
	}
	fmt.Fprintf(r.cfg.Progress, "==> Opening and funding %d accounts for owner %s\n", 2*r.cfg.Clients+2, r.ownerID)
	svc := app.New(r.t.DB, r.t.Temporal, app.Settings{SyncWait: time.Minute, TTL: 24 * time.Hour, RetryFor: 2 * time.Minute, Converter: r.t.Converter}, nil, nil).Transfers
	open := func(amount int64) (string, error) {
		acc, err := ledger.CreateAccount(ctx, r.t.DB, ledger.NewID("acc_"), r.ownerID, "USD", "bench", nil)
		if err != nil {
			return "", err
		}
		a, err := svc.Deposit(ctx, acc.ID, amount, "bench-fund-"+acc.ID)
		if err == nil && a.Status != http.StatusCreated {
			err = fmt.Errorf("deposit: %d %s", a.Status, a.Body)
		}
		return acc.ID, err
	}
	for range 2*r.cfg.Clients + 2 {
		id, err := open(1e12)
		if err != nil {
			return err
		}
		r.spread = append(r.spread, id)
	}
	if r.hot, err = open(1e14); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 50 {
		a, b := pick(rng, len(r.spread))
		key, body := fmt.Sprintf("bench-%s-replayed-%d", r.id, i), transferBody(r.spread[a], r.spread[b])
		if _, err := r.post(ctx, key, body, false); err != nil {
			return err
		}
		r.replayKey, r.replays = append(r.replayKey, key), append(r.replays, body)
	}
	return nil
}

func transferBody(from, to string) string {
	return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":1,"currency":"USD","description":"bench"}`, from, to)
}

// post sends one transfer and wants 201, marked as a replay or not as expected.
func (r *run) post(ctx context.Context, key, body string, replay bool) (*http.Response, error) {
	return r.postTo(ctx, "/v1/transfers", key, body, replay)
}

// postTo sends one request to route and wants 201, marked as a replay or not as expected.
func (r *run) postTo(ctx context.Context, route, key, body string, replay bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", r.t.API+route, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		return resp, fmt.Errorf("%s: the API rate-limited the bench's key (429): run the stack with a PAYMENTS_RATE_LIMIT above "+
			"what the bench sends, e.g. PAYMENTS_RATE_LIMIT=100000 make run", key)
	}
	if resp.StatusCode != http.StatusCreated || (resp.Header.Get("Idempotent-Replayed") == "true") != replay {
		return resp, fmt.Errorf("%s: %d %s", key, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp, nil
}

func (r *run) transfer(phase string, pair func(*rand.Rand) (string, string)) op {
	return func(ctx context.Context, c, n int) error {
		rng := rand.New(rand.NewPCG(uint64(c), uint64(n)))
		from, to := pair(rng)
		_, err := r.post(ctx, fmt.Sprintf("bench-%s-%s-%d-%d", r.id, phase, c, n), transferBody(from, to), false)
		return err
	}
}

// payout creates a payout of 1 minor unit from an account of the spread: its first answer is
// given when its money is held, so this measures what a client waits for (the bank settles it
// later).
func (r *run) payout(phase string) op {
	return func(ctx context.Context, c, n int) error {
		rng := rand.New(rand.NewPCG(uint64(c), uint64(n)))
		body := fmt.Sprintf(`{"account_id":%q,"amount_minor":1,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}`,
			r.spread[rng.IntN(len(r.spread))])
		_, err := r.postTo(ctx, "/v1/payouts", fmt.Sprintf("bench-%s-%spayout-%d-%d", r.id, phase, c, n), body, false)
		return err
	}
}

func (r *run) replay(ctx context.Context, c, n int) error {
	i := (c*7919 + n) % len(r.replays)
	_, err := r.post(ctx, r.replayKey[i], r.replays[i], true)
	return err
}

// posting is a transfer under a scope of its own, as the API would make it.
func (r *run) posting(key, from, to string) ledger.Posting {
	s := idempotency.Scope{OwnerID: r.ownerID, Route: idempotency.RouteTransfers, Key: key}
	return ledger.Posting{TransferID: s.TransferID(0), WorkflowID: s.WorkflowID(), From: from, To: to,
		AmountMinor: 1, Currency: "USD", Scope: s, ReplayFor: config.Duration(24 * time.Hour)}
}

func (r *run) randomPosting(kind, phase string, client, n int) ledger.Posting {
	rng := rand.New(rand.NewPCG(uint64(client), uint64(n)))
	a, b := pick(rng, len(r.spread))
	return r.posting(fmt.Sprintf("bench-%s-%s%s-%d-%d", r.id, kind, phase, client, n), r.spread[a], r.spread[b])
}

func (r *run) postingOnly(phase string) op {
	return func(ctx context.Context, c, n int) error {
		_, _, err := r.ledger.Post(ctx, r.randomPosting("ledger", phase, c, n), api.TransferAnswer)
		return err
	}
}

// emptyWorkflow starts an empty workflow, eagerly (its first task runs in this process) or not
// (dispatched through the matching service, as to a worker in another process), and waits for
// its result.
func (r *run) emptyWorkflow(phase string, eager bool) op {
	kind := map[bool]string{true: "empty", false: "started"}[eager]
	return func(ctx context.Context, c, n int) error {
		run, err := r.t.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: fmt.Sprintf("bench-%s-%s-%s-%d-%d", kind, r.id, phase, c, n), TaskQueue: taskQueue, EnableEagerStart: eager,
		}, emptyWorkflow)
		if err != nil {
			return err
		}
		return run.Get(ctx, nil)
	}
}

// updateWithStart starts a workflow and has its answer in one call (Update-With-Start), the
// workflow's first task dispatched through the matching service.
func (r *run) updateWithStart(phase string) op {
	return func(ctx context.Context, c, n int) error {
		id := fmt.Sprintf("bench-uws-%s-%s-%d-%d", r.id, phase, c, n)
		start := r.t.Temporal.NewWithStartWorkflowOperation(client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue,
			WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING}, emptyAnswered)
		h, err := r.t.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start,
			UpdateOptions: client.UpdateWorkflowOptions{UpdateName: answerUpdate, UpdateID: id, WaitForStage: client.WorkflowUpdateStageCompleted}})
		if err != nil {
			return err
		}
		return h.Get(ctx, nil)
	}
}

func (r *run) tutorial(phase string) op {
	return func(ctx context.Context, c, n int) error {
		id := fmt.Sprintf("bench-tutorial-%s-%s-%d-%d", r.id, phase, c, n)
		run, err := r.t.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue},
			tutorialWorkflow, r.randomPosting("tutorial", phase, c, n))
		if err != nil {
			return err
		}
		return run.Get(ctx, nil)
	}
}

// events counts the history events of a workflow: what the server persists per transfer.
func (r *run) events(ctx context.Context, workflowID string) int {
	_ = r.t.Temporal.GetWorkflow(ctx, workflowID, "").Get(ctx, nil) // the API may answer before it closes
	it := r.t.Temporal.GetWorkflowHistory(ctx, workflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		if _, err := it.Next(); err != nil {
			return -1
		}
		n++
	}
	return n
}

// JSON writes the results for comparison between runs.
func (res Results) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
