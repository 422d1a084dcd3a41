package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/webhook"
	"github.com/payments/payments/rig/testenv"
)

// The checker must be able to fail. On a populated ledger (the run's own set-up, then a
// transfer of each outcome, refunds of each, payouts paid and refused, two webhook endpoints
// with their deliveries), where it finds nothing, each row breaks one thing, in a transaction
// that is rolled back (or in a fresh copy of the operations, the bank's statement, the feed's
// pages or the deliveries), and expects the violation that names it.
func TestCheckerFindsWhatIsWrong(t *testing.T) {
	f := newFixture(t)
	if found := f.check(t, func(context.Context, *testing.T, pgx.Tx, *state) {}); len(found) > 0 {
		t.Fatalf("the checker finds violations in a ledger that has none:\n%s", strings.Join(found, "\n"))
	}
	for _, row := range breaks {
		t.Run(row.name, func(t *testing.T) {
			found := f.check(t, row.breaks)
			for _, want := range row.want {
				if !slices.ContainsFunc(found, func(v string) bool { return strings.Contains(v, want) }) {
					t.Errorf("no violation says %q; found:\n%s", want, strings.Join(found, "\n"))
				}
			}
		})
	}
	c := &checker{}
	c.add(f.ops["transfer"], "a violation")
	at := f.ops["transfer"].Start
	log := []fault{{Kind: faultKillAPI, Target: "api-1", Start: at, End: at}}
	if d := describe(7, c.found[0], log, "faults.log"); !strings.Contains(d, "seed 7") || !strings.Contains(d, "operation 0") ||
		!strings.Contains(d, "kill-api api-1") {
		t.Fatalf("a violation must name the seed, the operation and the faults around it:\n%s", d)
	}
}

// breaks are the rows: what to break, and what the checker must then say.
var breaks = []struct {
	name   string
	want   []string
	breaks func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state)
}{
	// Every final answer, and all answers for one key.
	{"no final answer", []string{"no final answer after"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["payout"].Answers = nil
	}},
	{"a concurrent sender without one", []string{"no final answer after"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		o := s.ops["concurrent"]
		o.Answers = o.Answers[:2]
	}},
	{"two stored answers for one key", []string{"two answers for one key"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		o := s.ops["concurrent"]
		o.Answers[1].Body = strings.Replace(o.Answers[1].Body, `"status":"completed"`, `"status":"pending"`, 1)
	}},
	{"sent again, answered otherwise", []string{"sent again, answered otherwise"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["again"].Answers[0] = s.ops["rejected"].Answers[0]
	}},
	{"a reused key that ran", []string{"a key reused with another body was answered"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["reused"].Answers[0] = s.ops["transfer"].Answers[0]
	}},
	// Transfers.
	{"transfer: status mismatch", []string{"answered completed is failed with 2 entries"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET status = 'failed' WHERE id = $1`, s.id("transfer"))
	}},
	{"transfer: not in the ledger", []string{"is not in the ledger"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		o := s.ops["transfer"]
		o.Answers[0].Body = strings.Replace(o.Answers[0].Body, s.id("transfer"), "tr_nowhere", 1)
	}},
	{"transfer: amount mismatch", []string{"moved 120, the request asked 121"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["transfer"].Amount = 121
	}},
	{"transfer: account mismatch", []string{"moves USD from", "the workload asked USD from"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET to_account_id = $2 WHERE id = $1`, s.id("transfer"), s.w.owners[2].Accounts[0])
	}},
	{"transfer: currency mismatch", []string{"moves EUR from"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET currency = 'EUR' WHERE id = $1`, s.id("transfer"))
	}},
	{"transfer: refused for funds, but completed", []string{"answered rejected is completed with 0 entries"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET status = 'completed' WHERE id = $1`, s.ops["rejected"].Answers[0].field("transfer_id"))
	}},
	{"transfer: unexpected answer", []string{"unexpected answer 400"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["transfer"].Answers[0] = answer{Status: 400, Body: `{"type":"/problems/invalid-request"}`}
	}},
	// Authorizations and their decisions.
	{"authorization: amount mismatch", []string{"holds 100 from"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["authorization"].Amount = 101
	}},
	{"authorization: refused for funds, but held", []string{"refused for funds is voided"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		voided, refused := s.ops["authorization-voided"], s.ops["authorization-refused"].Answers[0]
		voided.Answers[0] = answer{Status: refused.Status,
			Body: strings.ReplaceAll(refused.Body, refused.field("authorization_id"), voided.Answers[0].field("id"))}
	}},
	{"decision: a void that won, but captured", []string{"a void answered 200, but authorization"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["capture"].Kind = kindVoid
	}},
	{"decision: a capture of another amount", []string{"a capture of 41 answered 200"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["capture"].Amount = 41
	}},
	{"decision: refused as not pending while authorized", []string{"refused as not pending"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		o := s.ops["void-late"]
		o.Answers[0].Body = strings.Replace(o.Answers[0].Body, `"authorization_status":"captured"`, `"authorization_status":"authorized"`, 1)
	}},
	// Refunds.
	{"refund: of another transfer", []string{"refunds " + "tr_"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET refund_of = $2 WHERE id = $1`, s.id("refund"), s.id("concurrent"))
	}},
	{"refund: account mismatch", []string{"the workload asked USD from"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET from_account_id = $2 WHERE id = $1`, s.id("refund"), s.w.owners[3].Accounts[1])
	}},
	{"refund: refused in the ledger, but completed", []string{"answered rejected is completed"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET status = 'completed' WHERE id = $1`, s.ops["refund-rejected"].Answers[0].field("refund_id"))
	}},
	{"refund: refused as exceeding, with enough left", []string{"refused as exceeding transfer"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["refund-exceeds"].Amount = 1
	}},
	{"refund: refused as not refundable, but completed", []string{"refused as not refundable, but transfer"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET status = 'completed' WHERE id = $1`, s.ops["rejected"].Answers[0].field("transfer_id"))
	}},
	{"refund: unexpected answer", []string{"unexpected answer 500"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["refund"].Answers[0] = answer{Status: 500, Body: `{}`}
	}},
	// Payouts.
	{"payout: unexpected answer", []string{"unexpected answer 409"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["payout"].Answers[0] = answer{Status: 409, Body: `{}`}
	}},
	{"payout: not in the ledger", []string{"answered 201 is not in the ledger"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["payout"].Answers[0].Body = `{"id":"po_nowhere"}`
	}},
	{"payout: amount mismatch", []string{"holds 700, the request asked 701"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["payout"].Amount = 701
	}},
	{"payout: account mismatch", []string{"the request asked " + "acc_"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE payouts SET account_id = $2 WHERE id = $1`, s.id("payout"), s.w.owners[4].Accounts[0])
	}},
	{"payout: refused for funds, but paid", []string{"refused for funds is paid"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE payouts SET status = 'paid' WHERE id = $1`, s.ops["payout-refused"].Answers[0].field("payout_id"))
	}},
	{"payout: still processing", []string{"still processing after the drain", "payouts still processing"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE payouts SET status = 'processing' WHERE id = $1`, s.id("payout"))
	}},
	// The bank's statement.
	{"a payout paid twice", []string{"the bank holds 2 payments for it", "has 2 bank payments"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		second := s.statement[0]
		second.ID = "pay_second"
		s.statement = append(s.statement, second)
	}},
	{"a paid payout the bank returned", []string{"the bank holds 1 payments for it"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.statement[0].Status = bank.Returned
	}},
	{"a failed payout the bank paid", []string{"failed; the bank holds"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.statement = append(s.statement, bank.Payment{ID: "pay_refused", Status: bank.Paid, AmountMinor: 900_000, Currency: currency,
			Reference: s.ops["payout-refused"].Answers[0].field("payout_id")})
	}},
	{"the bank's statement unreadable", []string{"the bank's statement: the bank is down"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.statement, s.statementErr = nil, fmt.Errorf("the bank is down")
	}},
	// The ledger as a whole.
	{"a reconcile invariant broken", []string{"payments reconcile:", "BROKEN"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE accounts SET balance_minor = balance_minor + 1 WHERE id = $1`, s.w.owners[0].Accounts[0])
	}},
	{"the ledger unreadable", []string{"reconcile: the ledger is cut off"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.fail = "FROM accounts), (SELECT count(*) FROM transfers)"
	}},
	{"the payouts unreadable", []string{"payouts: the ledger is cut off"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.fail = "SELECT id, status FROM payouts"
	}},
	{"the leftovers unreadable", []string{"holds still open: the ledger is cut off"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.fail = "FROM holds WHERE status = 'open'"
	}},
	{"the events unreadable", []string{"owner 0's events: the ledger is cut off"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.fail = "FROM event_owners eo JOIN events"
	}},
	{"a transfer pending leftover", []string{"1 transfers or refunds still pending after the drain"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE transfers SET status = 'pending' WHERE id = $1`, s.id("concurrent"))
	}},
	{"a hold open leftover", []string{"1 holds still open after the drain"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE holds SET status = 'open', ended_at = NULL WHERE payout_id = $1`, s.id("payout"))
	}},
	{"a claim without its answer", []string{"1 claims without an answer after the drain"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		scope := idempotency.Scope{OwnerID: s.w.owners[0].ID, Route: idempotency.RouteTransfers, Key: "left-claimed"}
		if _, _, err := idempotency.Claim(ctx, tx, scope, []byte("fp"), scope.TransferID(0)); err != nil {
			t.Fatal(err)
		}
	}},
	{"scheduled transfer: amount mismatch", []string{"moves 30 from"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["scheduled"].Amount = 31
	}},
	{"scheduled transfer: still active", []string{"is active after 2 of 2 occurrences", "1 scheduled transfers still active after the drain"},
		func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
			execSQL(ctx, t, tx, `UPDATE scheduled_transfers SET status = 'active', completed_at = NULL WHERE id = $1`, s.id("scheduled"))
		}},
	{"scheduled transfer: an occurrence started without its transfer", []string{"started 2 occurrences, which made 1 transfers"},
		func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
			execSQL(ctx, t, tx, `UPDATE scheduled_transfers SET occurrences = 2 WHERE id = $1`, s.id("scheduled-cancelled"))
		}},
	{"scheduled transfer: refused for its start_at, yet claimed", []string{"yet its key has 1 claims"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		scope := idempotency.Scope{OwnerID: s.w.owners[4].ID, Route: idempotency.RouteScheduledTransfers, Key: s.ops["scheduled-late"].Key}
		if _, _, err := idempotency.Claim(ctx, tx, scope, []byte("fp"), scope.ScheduledTransferID(0)); err != nil {
			t.Fatal(err)
		}
	}},
	{"scheduled transfer: refused for its start_at within the slack", []string{"unexpected answer 400"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.ops["scheduled-late"].Body = startedAt(s.ops["scheduled-late"].End.Add(-10 * time.Second))
	}},
	{"cancel: answered 200, but the schedule completed", []string{"a cancel answered 200"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE scheduled_transfers SET status = 'completed', completed_at = now(), cancelled_at = NULL, occurrences = 3
			WHERE id = $1`, s.id("scheduled-cancelled"))
	}},
	{"a run still open", []string{"2 transfer, refund, payout, payin, authorization or scheduled-transfer workflows still running"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.running = 2
	}},
	{"Temporal unreadable", []string{"listing running workflows: Temporal is down"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.runningErr = fmt.Errorf("Temporal is down")
	}},
	// The feed.
	{"a feed unreadable", []string{"owner 1's feed: answered 500"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.page = func(owner int, p *feedPage) bool { return owner != 1 }
	}},
	{"a feed event missing", []string{"owner 0's feed shows 8 events, the ledger has 9 for it"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.page = func(owner int, p *feedPage) bool {
			if owner == 0 && len(p.Data) > 3 {
				p.Data = slices.Delete(p.Data, 3, 4)
			}
			return true
		}
	}},
	{"a feed event shown twice", []string{"owner 0's feed shows event evt_"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.page = func(owner int, p *feedPage) bool {
			if owner == 0 && len(p.Data) > 3 {
				p.Data = append(p.Data, p.Data[2])
			}
			return true
		}
	}},
	{"a feed out of order", []string{"(in the same order: false)"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.page = func(owner int, p *feedPage) bool {
			if owner == 0 && len(p.Data) > 3 {
				p.Data[1], p.Data[2] = p.Data[2], p.Data[1]
			}
			return true
		}
	}},
	{"an event in the ledger, not in the feed", []string{"owner 2's feed shows 3 events, the ledger has 4 for it"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `WITH e AS (INSERT INTO events (seq, id, type, object_id, body, created_at)
			VALUES (nextval('event_seq'), 'evt_unseen', 'transfer.completed', 'tr_unseen', '{}', now()) RETURNING seq)
			INSERT INTO event_owners (owner_id, event_seq, type) SELECT $1, seq, 'transfer.completed' FROM e`, s.w.owners[2].ID)
	}},
	// The webhook endpoints and what reached them.
	{"an endpoint answered 201 without its secret", []string{"unexpected answer 201"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		o := s.w.hooks[0].Op
		o.Answers[0].Body = strings.Replace(o.Answers[0].Body, `"secret"`, `"secrets"`, 1)
	}},
	{"an endpoint not in the ledger", []string{"answered 201 is not in the ledger"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE webhook_endpoints SET deleted_at = now() WHERE id = $1`, s.w.hooks[1].ID)
	}},
	{"an endpoint at another URL", []string{"the request asked owner"}, func(ctx context.Context, t *testing.T, tx pgx.Tx, s *state) {
		execSQL(ctx, t, tx, `UPDATE webhook_endpoints SET url = url || 'x' WHERE id = $1`, s.w.hooks[0].ID)
	}},
	{"an event never delivered", []string{"1 of the 9 events due to endpoint", `is "pending" in its outbox`}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries = slices.DeleteFunc(s.deliveries, func(d delivery) bool { return d.hook == 0 && d.event == 4 })
	}},
	{"deliveries out of order", []string{"not in the feed's order"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries[2], s.deliveries[3] = s.deliveries[3], s.deliveries[2]
	}},
	{"another owner's event delivered", []string{"which is not in its owner's feed"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries = append(s.deliveries, delivery{hook: 0, event: -1})
	}},
	{"an event of a type not subscribed", []string{"which it does not subscribe to"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries = append(s.deliveries, delivery{hook: 1, event: s.feedIndex(0, ledger.EventTransferRejected)})
	}},
	{"a delivery badly signed", []string{"whose signature does not verify (no signature matches"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries = append(s.deliveries, delivery{hook: 0, event: 1, secret: "whsec_another"})
	}},
	{"a delivery unsigned", []string{"whose signature does not verify (malformed"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries = append(s.deliveries, delivery{hook: 0, event: 1, unsigned: true})
	}},
	{"a delivery under another event id", []string{"not an event, or under another id"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries = append(s.deliveries, delivery{hook: 0, event: 1, eventID: "evt_other"})
	}},
	{"a delivery to no endpoint", []string{"which is no endpoint's"}, func(_ context.Context, _ *testing.T, _ pgx.Tx, s *state) {
		s.deliveries = append(s.deliveries, delivery{hook: 0, event: 1, path: "/hooks/9/9"})
	}},
}

func execSQL(ctx context.Context, t *testing.T, tx pgx.Tx, sql string, args ...any) {
	t.Helper()
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// fixture is the populated ledger, and what the workload sent to make it.
type fixture struct {
	db        *pgxpool.Pool
	w         *workload
	ops       map[string]*op // by role: "transfer", "concurrent", "rejected", "again", …
	order     []string       // the roles, in the order of their operations
	statement []bank.Payment
	feeds     [][]feedEvent // as the API shows them, before any row breaks them
	bodies    map[string][]byte
	api       *httptest.Server
	page      func(owner int, p *feedPage) bool // the row's, while it runs
}

// feedPage is a page of GET /v1/events, as a row may edit it.
type feedPage struct {
	Data       []json.RawMessage `json:"data"`
	NextCursor *string           `json:"next_cursor"`
}

func newFixture(t *testing.T) *fixture {
	ctx := context.Background()
	_, db := testenv.FreshPool(t, "payments_test_chaos_checker")
	l := &ledger.Ledger{DB: db}
	f := &fixture{db: db, ops: map[string]*op{}, bodies: map[string][]byte{}}
	f.w = &workload{seed: 1, client: &http.Client{Timeout: 10 * time.Second}}
	if err := f.w.setUp(ctx, l); err != nil { // the owners, their accounts, funded
		t.Fatal(err)
	}
	f.endpoints(ctx, t, l)
	f.populate(ctx, t, l)
	f.serveFeed(t, l)
	for _, o := range f.w.owners {
		events, err := readFeed(ctx, f.w.client, f.api.URL, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		f.feeds = append(f.feeds, events)
	}
	rows, err := db.Query(ctx, `SELECT id, body FROM events`)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	var body []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &body}, func() error { f.bodies[id] = slices.Clone(body); return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(f.feeds[0]); n != 9 {
		t.Fatalf("owner 0's feed has %d events; the rows expect 9", n)
	}
	return f
}

// endpoints gives owner 0 the run's two endpoints, in the ledger, with the answers their
// creation got, before any of its money moves.
func (f *fixture) endpoints(ctx context.Context, t *testing.T, l *ledger.Ledger) {
	var err error
	if f.w.recv, err = startReceiver(1, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.w.recv.close)
	for n, types := range endpointTypes {
		e := &endpoint{Owner: 0, Path: fmt.Sprintf("/hooks/0/%d", n), Types: types, ID: fmt.Sprintf("we_checker%d", n)}
		subscribed := types
		if types == nil {
			subscribed = []string{"*"}
		}
		secret := webhook.NewSecret()
		var created ledger.Endpoint
		if err := l.InTx(ctx, func(tx pgx.Tx) (err error) {
			created, err = ledger.CreateEndpoint(ctx, tx, testenv.Keys, f.w.owners[0].ID, ledger.Endpoint{ID: e.ID, URL: f.w.recv.url + e.Path,
				EventTypes: subscribed, Secret: secret})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(created)
		e.Op = &op{N: n, Kind: kindEndpoint, Ref: -1, Answers: []answer{{Status: http.StatusCreated, Body: string(body)}}}
		f.w.hooks = append(f.w.hooks, e)
	}
	// The deposits committed before the endpoints: in the run they come after, so are due.
	if _, err := f.db.Exec(ctx, `INSERT INTO webhook_deliveries (endpoint_id, event_seq)
		SELECT $1, eo.event_seq FROM event_owners eo WHERE eo.owner_id = $2 ON CONFLICT DO NOTHING`, f.w.hooks[0].ID, f.w.owners[0].ID); err != nil {
		t.Fatal(err)
	}
}

// populate moves money as the workload's operations would have, through the ledger's own
// functions, and keeps each operation with the answers its senders got.
func (f *fixture) populate(ctx context.Context, t *testing.T, l *ledger.Ledger) {
	acc := func(owner, n int) string { return f.w.owners[owner].Accounts[n] }
	transfer := f.transfer(ctx, t, l)
	transfer("transfer", plain, 0, acc(0, 0), acc(1, 0), 120, 1)
	transfer("concurrent", concurrent, 0, acc(0, 1), acc(2, 0), 300, 3)
	transfer("rejected", plain, 0, acc(0, 0), acc(3, 0), 900_000, 1)
	again := f.add("again", &op{Kind: kindTransfer, Variant: again, Ref: f.ops["transfer"].N})
	again.Answers = slices.Clone(f.ops["transfer"].Answers)
	f.add("reused", &op{Kind: kindTransfer, Variant: reused, Ref: f.ops["transfer"].N, Answers: []answer{{Status: 422,
		Body: `{"type":"/problems/idempotency-key-reused","status":422}`}}})

	refund := f.refund(ctx, t, l)
	refund("refund", "transfer", 50)
	refund("refund-rejected", "transfer", 100) // 70 left: refused in the ledger
	exceeds := f.add("refund-exceeds", &op{Kind: kindRefund, Ref: f.ops["transfer"].N, Amount: 1000, Target: f.id("transfer"),
		Answers: []answer{{Status: 422, Body: `{"type":"/problems/refund-exceeds-transfer"}`}}})
	exceeds.From, exceeds.To = acc(1, 0), acc(0, 0)
	f.add("refund-not-refundable", &op{Kind: kindRefund, Ref: f.ops["rejected"].N, Amount: 5,
		Target: f.ops["rejected"].Answers[0].field("transfer_id"), Answers: []answer{{Status: 422, Body: `{"type":"/problems/transfer-not-refundable"}`}}})

	payout := f.payout(ctx, t, l)
	payout("payout", 0, acc(0, 0), 700, true)
	payout("payout-refused", 0, acc(0, 1), 900_000, false)

	authorize, decide := f.authorization(ctx, t, l), f.decision(ctx, t, l)
	authorize("authorization", 4, acc(4, 0), acc(5, 1), 100)
	decide("capture", "authorization", kindCapture, 40)
	decide("void-late", "authorization", kindVoid, 0) // 422 authorization-not-pending
	authorize("authorization-voided", 4, acc(4, 1), acc(5, 1), 60)
	decide("void", "authorization-voided", kindVoid, 0)
	authorize("authorization-refused", 4, acc(4, 1), acc(5, 1), 900_000)

	schedule := f.scheduled(ctx, t, l)
	schedule("scheduled", 4, acc(4, 0), acc(5, 0), 30, 2, 2, false)
	schedule("scheduled-cancelled", 4, acc(4, 1), acc(5, 0), 20, 3, 1, true)
	// One whose attempts got through only past start_at's slack: refused, nothing claimed.
	late := f.add("scheduled-late", &op{Kind: kindSchedule, Ref: -1, Owner: 4, From: acc(4, 0), To: acc(5, 0), Amount: 10, Count: 1, Interval: 1})
	late.Body = startedAt(late.End.Add(-2 * time.Minute))
	late.Answers = []answer{{Status: http.StatusBadRequest,
		Body: `{"type":"/problems/invalid-request","status":400,"errors":[{"field":"start_at","message":"must be now or later"}]}`}}
}

// startedAt is a scheduled transfer's body as the checker reads it: its start_at.
func startedAt(at time.Time) string {
	return fmt.Sprintf(`{"start_at":%q}`, at.UTC().Format(time.RFC3339Nano))
}

// scheduled makes a scheduled transfer as POST /v1/scheduled-transfers and its run do: count
// occurrences, started of them started and posted, then cancelled by its payer's DELETE (the
// op role+"-cancel") when cancel says so.
func (f *fixture) scheduled(ctx context.Context, t *testing.T, l *ledger.Ledger) func(role string, owner int, from, to string, amount int64, count, started int, cancel bool) {
	return func(role string, owner int, from, to string, amount int64, count, started int, cancel bool) {
		o := f.add(role, &op{Kind: kindSchedule, Ref: -1, Owner: owner, From: from, To: to, Amount: amount, Count: count, Interval: 1})
		ownerID := f.w.owners[owner].ID
		scope := idempotency.Scope{OwnerID: ownerID, Route: idempotency.RouteScheduledTransfers, Key: o.Key}
		id, interval := scope.ScheduledTransferID(0), "1s"
		f.claim(ctx, t, scope, id)
		if err := ledger.InsertScheduledTransfer(ctx, f.db, ledger.ScheduledTransfer{ID: id, OwnerID: ownerID, FromAccountID: from,
			ToAccountID: to, AmountMinor: amount, Currency: currency, StartAt: time.Now(), Interval: &interval, IntervalMS: 1000,
			Count: &count, WorkflowID: scope.WorkflowID()}); err != nil {
			t.Fatal(err)
		}
		_, resp, err := l.ActivateScheduledTransfer(ctx, id, scope, config.Duration(idempotencyTTL), api.ScheduledTransferAnswer)
		if err != nil {
			t.Fatal(err)
		}
		o.Answers = []answer{{Status: resp.Status, Body: string(resp.Body)}}
		for n := 1; n <= started; n++ {
			if _, begun, err := l.BeginOccurrence(ctx, id, n); err != nil || !begun {
				t.Fatalf("occurrence %d: %v %v", n, begun, err)
			}
			occ := idempotency.OccurrenceScope(ownerID, id, n)
			if _, _, err := l.Post(ctx, ledger.Posting{TransferID: occ.TransferID(0), WorkflowID: occ.WorkflowID(), From: from, To: to,
				AmountMinor: amount, Currency: currency, ScheduledTransferID: id, Occurrence: n}, api.TransferAnswer); err != nil {
				t.Fatal(err)
			}
		}
		if cancel {
			c := f.add(role+"-cancel", &op{Kind: kindCancel, Ref: o.N, Owner: owner, From: from, To: to, Target: id})
			st, err := l.CancelScheduledTransfer(ctx, ownerID, id)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(st)
			c.Answers = []answer{{Status: http.StatusOK, Body: string(body)}}
		}
	}
}

// authorization holds an authorization's money as POST /v1/authorizations does.
func (f *fixture) authorization(ctx context.Context, t *testing.T, l *ledger.Ledger) func(role string, owner int, from, to string, amount int64) {
	return func(role string, owner int, from, to string, amount int64) {
		o := f.add(role, &op{Kind: kindAuthorize, Ref: -1, Owner: owner, From: from, To: to, Amount: amount})
		scope := idempotency.Scope{OwnerID: f.w.owners[owner].ID, Route: idempotency.RouteAuthorizations, Key: o.Key}
		id := scope.AuthorizationID(0)
		f.claim(ctx, t, scope, id)
		if err := ledger.InsertAuthorization(ctx, f.db, ledger.Authorization{ID: id, FromAccountID: from, ToAccountID: to,
			AmountMinor: amount, Currency: currency, ExpiresAt: time.Now().Add(time.Hour), WorkflowID: scope.WorkflowID()}); err != nil {
			t.Fatal(err)
		}
		_, resp, err := l.Authorize(ctx, ledger.Decision{AuthorizationID: id, Action: ledger.ActionAuthorize, Scope: scope,
			ReplayFor: config.Duration(idempotencyTTL)}, api.AuthorizationAnswer)
		if err != nil {
			t.Fatal(err)
		}
		o.Answers = []answer{{Status: resp.Status, Body: string(resp.Body)}}
	}
}

// decision captures (amount, 0 for all) or voids the authorization of role of, as its payee's
// POST …/capture or …/void does.
func (f *fixture) decision(ctx context.Context, t *testing.T, l *ledger.Ledger) func(role, of, kind string, amount int64) {
	return func(role, of, kind string, amount int64) {
		au := f.ops[of]
		o := f.add(role, &op{Kind: kind, Ref: au.N, Owner: f.w.ownerOf(au.To), From: au.From, To: au.To, Amount: amount, Target: f.id(of)})
		route, action := idempotency.RouteCapture, ledger.ActionCapture
		if kind == kindVoid {
			route, action = idempotency.RouteVoid, ledger.ActionVoid
		}
		scope := idempotency.Scope{OwnerID: f.w.owners[o.Owner].ID, Route: route, Key: o.Key}
		f.claim(ctx, t, scope, o.Target)
		_, resp, err := l.Decide(ctx, ledger.Decision{AuthorizationID: o.Target, Action: action, AmountMinor: amount, Scope: scope,
			ReplayFor: config.Duration(idempotencyTTL)}, api.AuthorizationAnswer)
		if err != nil {
			t.Fatal(err)
		}
		o.Answers = []answer{{Status: resp.Status, Body: string(resp.Body)}}
	}
}

func (f *fixture) add(role string, o *op) *op {
	o.N = len(f.order)
	o.Key = fmt.Sprintf("checker-%d", o.N)
	o.Start, o.End = time.Now(), time.Now()
	f.ops[role] = o
	f.order = append(f.order, role)
	return o
}

// id is the transfer, refund or payout the operation of role made.
func (f *fixture) id(role string) string { return f.ops[role].Answers[0].field("id") }

func (f *fixture) transfer(ctx context.Context, t *testing.T, l *ledger.Ledger) func(role, variant string, owner int, from, to string, amount int64, senders int) {
	return func(role, variant string, owner int, from, to string, amount int64, senders int) {
		o := f.add(role, &op{Kind: kindTransfer, Variant: variant, Ref: -1, Owner: owner, From: from, To: to, Amount: amount})
		scope := idempotency.Scope{OwnerID: f.w.owners[owner].ID, Route: idempotency.RouteTransfers, Key: o.Key}
		f.claim(ctx, t, scope, scope.TransferID(0))
		_, resp, err := l.Post(ctx, ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(), From: from, To: to,
			AmountMinor: amount, Currency: currency, Scope: scope}, api.TransferAnswer)
		if err != nil {
			t.Fatal(err)
		}
		for range senders {
			o.Answers = append(o.Answers, answer{Status: resp.Status, Body: string(resp.Body)})
		}
	}
}

func (f *fixture) refund(ctx context.Context, t *testing.T, l *ledger.Ledger) func(role, of string, amount int64) {
	return func(role, of string, amount int64) {
		tr := f.ops[of]
		o := f.add(role, &op{Kind: kindRefund, Ref: tr.N, Owner: f.w.ownerOf(tr.To), From: tr.To, To: tr.From, Amount: amount, Target: f.id(of)})
		scope := idempotency.Scope{OwnerID: f.w.owners[o.Owner].ID, Route: idempotency.RouteRefunds, Key: o.Key}
		f.claim(ctx, t, scope, scope.RefundID(0))
		_, resp, err := l.Post(ctx, ledger.Posting{TransferID: scope.RefundID(0), WorkflowID: scope.WorkflowID(), From: o.From, To: o.To,
			AmountMinor: amount, Currency: currency, Scope: scope, Kind: ledger.KindRefund, RefundOf: o.Target}, api.TransferAnswer)
		if err != nil {
			t.Fatal(err)
		}
		o.Answers = []answer{{Status: resp.Status, Body: string(resp.Body)}}
	}
}

// payout holds a payout's money as POST /v1/payouts does, and, when it is held, has the bank
// pay it (its statement then holds the payment).
func (f *fixture) payout(ctx context.Context, t *testing.T, l *ledger.Ledger) func(role string, owner int, from string, amount int64, paid bool) {
	return func(role string, owner int, from string, amount int64, paid bool) {
		o := f.add(role, &op{Kind: kindPayout, Ref: -1, Owner: owner, From: from, Amount: amount})
		scope := idempotency.Scope{OwnerID: f.w.owners[owner].ID, Route: idempotency.RoutePayouts, Key: o.Key}
		id := scope.PayoutID(0)
		f.claim(ctx, t, scope, id)
		dest := bank.Destination{AccountNumber: "000000000001", BankCode: "BANKUS33"}
		if _, err := ledger.InsertPayout(ctx, f.db, ledger.Payout{ID: id, AccountID: from, AmountMinor: amount, Currency: currency,
			Destination: dest, WorkflowID: scope.WorkflowID()}, 0); err != nil {
			t.Fatal(err)
		}
		_, resp, err := l.PlaceHold(ctx, ledger.PayoutHold{PayoutID: id, Scope: scope, ReplayFor: config.Duration(idempotencyTTL)}, api.PayoutAnswer)
		if err != nil {
			t.Fatal(err)
		}
		o.Answers = []answer{{Status: resp.Status, Body: string(resp.Body)}}
		if !paid {
			return
		}
		payment := "pay_" + o.Key
		if err := l.RecordBankPayment(ctx, id, payment); err != nil {
			t.Fatal(err)
		}
		if _, err := l.SettlePayout(ctx, id, true, ""); err != nil {
			t.Fatal(err)
		}
		f.statement = append(f.statement, bank.Payment{ID: payment, Status: bank.Paid, AmountMinor: amount, Currency: currency,
			Destination: dest, Reference: id, IdempotencyKey: id, CreatedAt: time.Now()})
	}
}

func (f *fixture) claim(ctx context.Context, t *testing.T, scope idempotency.Scope, id string) {
	if _, _, err := idempotency.Claim(ctx, f.db, scope, []byte(scope.Key), id); err != nil {
		t.Fatal(err)
	}
}

// serveFeed serves the API's feed, on the fixture's database, through the row's page editor.
func (f *fixture) serveFeed(t *testing.T, l *ledger.Ledger) {
	s := &api.Server{DB: f.db, Ledger: l, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.Handler()
	f.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		owner := slices.IndexFunc(f.w.owners, func(o owner) bool { return r.Header.Get("Authorization") == "Bearer "+o.Key })
		var p feedPage
		if f.page == nil || rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &p) != nil {
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		if !f.page(owner, &p) {
			http.Error(w, "the feed failed", http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(p)
	}))
	t.Cleanup(f.api.Close)
}

// state is one row's copy of what the checker is given.
type state struct {
	w            *workload
	ops          map[string]*op
	order        []string
	statement    []bank.Payment
	statementErr error
	running      int64
	runningErr   error
	page         func(owner int, p *feedPage) bool
	fail         string // the checker's queries that contain it fail
	deliveries   []delivery
	feeds        [][]feedEvent
}

// delivery is one request to the receiver: event (an index into the endpoint owner's feed; -1
// for an event of owner 1's) to hook, signed with its secret unless a row says otherwise.
type delivery struct {
	hook, event int
	secret      string // another secret than the endpoint's
	unsigned    bool
	eventID     string // another Payments-Event-Id than the event's
	path        string // another path than the endpoint's
}

func (s *state) id(role string) string { return s.ops[role].Answers[0].field("id") }

// feedIndex is the position of the first event of type typ in owner's feed.
func (s *state) feedIndex(owner int, typ string) int {
	return slices.IndexFunc(s.feeds[owner], func(e feedEvent) bool { return e.Type == typ })
}

// fresh copies the operations and what the bank, Temporal, the feed and the receiver give, as
// they are when nothing is broken: each endpoint receives every event due to it, in order, and
// the first one again at the end (at least once).
func (f *fixture) fresh() *state {
	s := &state{ops: map[string]*op{}, order: f.order, statement: slices.Clone(f.statement), feeds: f.feeds}
	w := *f.w
	w.hooks = nil
	for _, e := range f.w.hooks {
		c := *e
		c.Op = cloneOp(e.Op)
		w.hooks = append(w.hooks, &c)
	}
	s.w = &w
	for role, o := range f.ops {
		s.ops[role] = cloneOp(o)
	}
	for i, e := range f.w.hooks {
		for _, ev := range due(e, f.feeds[e.Owner]) {
			s.deliveries = append(s.deliveries, delivery{hook: i, event: slices.Index(f.feeds[e.Owner], ev)})
		}
		s.deliveries = append(s.deliveries, delivery{hook: i, event: slices.Index(f.feeds[e.Owner], due(e, f.feeds[e.Owner])[0])})
	}
	return s
}

func cloneOp(o *op) *op {
	return &op{N: o.N, Kind: o.Kind, Variant: o.Variant, Ref: o.Ref, Owner: o.Owner, Key: o.Key, Body: o.Body, Amount: o.Amount,
		Count: o.Count, Interval: o.Interval,
		From: o.From, To: o.To, Path: o.Path, Target: o.Target, Answers: slices.Clone(o.Answers), Attempts: o.Attempts,
		Start: o.Start, End: o.End}
}

// check runs the checker as Run does, on a copy of the fixture that breaks has broken, in a
// transaction it rolls back, and returns what it found.
func (f *fixture) check(t *testing.T, breaks func(context.Context, *testing.T, pgx.Tx, *state)) []string {
	ctx := context.Background()
	tx, err := f.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	s := f.fresh()
	breaks(ctx, t, tx, s)
	f.page = s.page
	defer func() { f.page = nil }()
	f.deliver(t, s)

	c := &checker{db: failing{tx, s.fail},
		statement: func(context.Context) ([]bank.Payment, error) { return s.statement, s.statementErr },
		running:   func(context.Context) (int64, error) { return s.running, s.runningErr }}
	byN := map[int]*op{}
	for _, role := range s.order {
		byN[s.ops[role].N] = s.ops[role]
	}
	for _, role := range s.order {
		c.op(ctx, s.ops[role], byN)
	}
	for _, e := range s.w.hooks {
		c.op(ctx, e.Op, byN)
		c.endpoint(ctx, s.w, e)
	}
	c.ledger(ctx)
	feeds := c.feed(ctx, s.w, f.api.URL)
	c.webhooks(ctx, s.w, feeds, deliveryBounds{Stall: time.Second, Cap: time.Minute})
	var found []string
	for _, v := range c.found {
		found = append(found, describe(1, v, nil, "faults.log"))
	}
	return found
}

// deliver sends the row's deliveries to the fixture's receiver, emptied, signed as the
// processor signs them.
func (f *fixture) deliver(t *testing.T, s *state) {
	r := f.w.recv
	r.mu.Lock()
	r.hooks, r.bad, r.fates = map[string]*hook{}, nil, map[string]int{}
	r.mu.Unlock()
	secrets := map[int]string{}
	for i, e := range s.w.hooks {
		target, err := (&ledger.Ledger{DB: f.db, Keys: testenv.Keys}).Target(context.Background(), e.ID)
		if err != nil {
			t.Fatal(err)
		}
		secret := target.Secret
		secrets[i] = secret
		r.expect(e.Path)
		r.register(e.Path, secret)
	}
	for _, d := range s.deliveries {
		e := s.w.hooks[d.hook]
		ev := s.feeds[1][0] // an event of another owner's
		if d.event >= 0 {
			ev = s.feeds[e.Owner][d.event]
		}
		body := f.bodies[ev.ID]
		req, _ := http.NewRequest(http.MethodPost, r.url+cmp.Or(d.path, e.Path), bytes.NewReader(body))
		req.Header.Set(webhook.EventIDHeader, cmp.Or(d.eventID, ev.ID))
		if !d.unsigned {
			req.Header.Set(webhook.SignatureHeader, webhook.Sign(cmp.Or(d.secret, secrets[d.hook]), time.Now(), body))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// failing is the ledger with the queries that contain match failing, as they do when
// PostgreSQL is cut off mid-check.
type failing struct {
	database.Querier
	match string
}

var errCutOff = errors.New("the ledger is cut off")

func (q failing) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if q.match != "" && strings.Contains(sql, q.match) {
		return nil, errCutOff
	}
	return q.Querier.Query(ctx, sql, args...)
}

func (q failing) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if q.match != "" && strings.Contains(sql, q.match) {
		return failedRow{}
	}
	return q.Querier.QueryRow(ctx, sql, args...)
}

type failedRow struct{}

func (failedRow) Scan(...any) error { return errCutOff }

// The wait for the webhook backlogs holds deliveries to going on, not to a pace: a backlog that
// keeps shrinking is waited for past Stall, one that stops is given up on after Stall, and Cap
// ends the wait whatever moves.
func TestDeliveryWatchWaitsWhileBacklogsShrink(t *testing.T) {
	b := deliveryBounds{Stall: 2 * time.Second, Cap: time.Minute}
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	d := newDeliveryWatch(t0)
	// "slow" takes one event a second, 10 in all; "done" has none left; "stuck" takes none.
	for s := 0; s <= 9; s++ {
		backlog := map[string]int{"slow": 10 - s, "done": 0, "stuck": 3}
		if d.settled(at(float64(s)), backlog, b) {
			t.Fatalf("settled at %d s while the slow endpoint's backlog still shrinks", s)
		}
	}
	if !d.settled(at(10), map[string]int{"slow": 0, "done": 0, "stuck": 3}, b) {
		t.Fatal("not settled once every endpoint is either done or has not moved for Stall")
	}
	if idle := at(10).Sub(d.moved["stuck"]); idle != 10*time.Second {
		t.Fatalf("the stuck endpoint has not moved for %s, want 10s", idle)
	}

	d = newDeliveryWatch(t0)
	if d.settled(at(0), map[string]int{"a": 5}, b) || d.settled(at(1.5), map[string]int{"a": 5}, b) {
		t.Fatal("settled before Stall passed")
	}
	if !d.settled(at(2), map[string]int{"a": 5}, b) {
		t.Fatal("not settled once the only endpoint has not moved for Stall")
	}

	d = newDeliveryWatch(t0)
	for s := 0; s < 60; s++ {
		d.settled(at(float64(s)), map[string]int{"a": 1000 - s}, b)
	}
	if !d.settled(at(60), map[string]int{"a": 940}, b) {
		t.Fatal("not settled at Cap")
	}
}
