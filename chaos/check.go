package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// violation is a property the run broke, about op (nil for the ledger as a whole).
type violation struct {
	Op   *op
	What string
}

// checker holds every operation's final answers to the ledger, the bank and Temporal.
type checker struct {
	db        database.Querier
	statement func(context.Context) ([]bank.Payment, error) // the bank's
	running   func(context.Context) (int64, error)          // the operations' runs still open in Temporal
	found     []violation
}

// newChecker is the checker of the run on s.
func newChecker(s *system) *checker {
	return &checker{db: s.db, statement: (&bank.HTTP{BaseURL: s.bankURL}).Statement,
		running: func(ctx context.Context) (int64, error) { return runningWorkflows(ctx, s) }}
}

func (c *checker) add(o *op, format string, args ...any) {
	c.found = append(c.found, violation{Op: o, What: fmt.Sprintf(format, args...)})
}

// posting is what the ledger holds of a transfer or refund.
type posting struct {
	Status, Kind, RefundOf string
	From, To, Currency     string
	Amount, Refunded       int64
	Entries                int
}

func (c *checker) posting(ctx context.Context, id string) (posting, bool) {
	var p posting
	err := c.db.QueryRow(ctx, `SELECT status, kind, COALESCE(refund_of, ''), from_account_id, to_account_id, currency,
		amount_minor, amount_refunded_minor, (SELECT count(*) FROM entries e WHERE e.transfer_id = t.id)
		FROM transfers t WHERE id = $1`, id).
		Scan(&p.Status, &p.Kind, &p.RefundOf, &p.From, &p.To, &p.Currency, &p.Amount, &p.Refunded, &p.Entries)
	return p, err == nil
}

// currency is the workload's: every account is in USD.
const currency = "USD"

// op checks one operation: every sender got a final answer, all of them the same, and the same
// as the operation it repeats; what the answer says is what the ledger holds.
func (c *checker) op(ctx context.Context, o *op, byN map[int]*op) {
	if o.Skipped != "" {
		return // what it refers to is reported
	}
	if len(o.Answers) == 0 || (o.Variant == concurrent && len(o.Answers) != 3) {
		c.add(o, "no final answer after %d attempts", o.Attempts)
		return
	}
	// Every stored answer for the key is the same. A refusal decided before the claim is not
	// stored (a refund's, docs/contract.md §8): a sender may get one while another's request,
	// which passed the check a moment earlier, is refused in the ledger; each is checked below.
	var first *answer
	for i := range o.Answers {
		a := &o.Answers[i]
		if !a.stored() {
			continue
		}
		if first == nil {
			first = a
		} else if a.Status != first.Status || a.Body != first.Body {
			c.add(o, "two answers for one key: %s / %s", first, a)
		}
	}
	if o.Variant == again {
		if orig := byN[o.Ref].Answers[0]; o.Answers[0].Status != orig.Status || o.Answers[0].Body != orig.Body {
			c.add(o, "sent again, answered otherwise: first %s, now %s", orig, o.Answers[0])
		}
		return
	}
	if first != nil {
		c.answer(ctx, o, *first)
	}
	for _, a := range o.Answers {
		if !a.stored() {
			c.answer(ctx, o, a)
		}
	}
}

// answer checks one final answer of o against the ledger.
func (c *checker) answer(ctx context.Context, o *op, first answer) {
	switch o.Variant {
	case reused:
		if first.Status != http.StatusUnprocessableEntity || first.field("type") != "/problems/idempotency-key-reused" {
			c.add(o, "a key reused with another body was answered %s", first)
		}
		return
	}
	switch o.Kind {
	case kindTransfer:
		c.transfer(ctx, o, first)
	case kindRefund:
		c.refund(ctx, o, first)
	case kindPayout:
		c.payout(ctx, o, first)
	case kindAuthorize:
		c.authorization(ctx, o, first)
	case kindCapture, kindVoid:
		c.decision(ctx, o, first)
	case kindSchedule:
		c.scheduled(ctx, o, first)
	case kindCancel:
		c.cancel(ctx, o, first)
	case kindEndpoint:
		if first.Status != http.StatusCreated || first.field("id") == "" || first.field("secret") == "" {
			c.add(o, "unexpected answer %s", first)
		}
	}
}

func (c *checker) transfer(ctx context.Context, o *op, a answer) {
	switch {
	case a.Status == http.StatusCreated:
		c.posted(ctx, o, a.field("id"), "completed", 2)
	case a.Status == http.StatusUnprocessableEntity && a.field("type") == "/problems/insufficient-funds":
		c.posted(ctx, o, a.field("transfer_id"), "rejected", 0)
	default:
		c.add(o, "unexpected answer %s", a)
	}
}

func (c *checker) refund(ctx context.Context, o *op, a answer) {
	typ := a.field("type")
	switch {
	case a.Status == http.StatusCreated:
		c.posted(ctx, o, a.field("id"), "completed", 2)
	case a.Status == http.StatusUnprocessableEntity && a.field("refund_id") != "":
		// Decided in the ledger: the refund exists, rejected, and moved nothing.
		c.posted(ctx, o, a.field("refund_id"), "rejected", 0)
	case a.Status == http.StatusUnprocessableEntity && typ == "/problems/refund-exceeds-transfer":
		// Decided before the claim: what remained then was less than asked, and refunds only
		// ever take more.
		t, ok := c.posting(ctx, o.Target)
		if !ok || t.Amount-t.Refunded >= max(o.Amount, 1) {
			c.add(o, "refused as exceeding transfer %s, which has %d of %d left", o.Target, t.Amount-t.Refunded, t.Amount)
		}
	case a.Status == http.StatusUnprocessableEntity && typ == "/problems/transfer-not-refundable":
		if t, ok := c.posting(ctx, o.Target); !ok || t.Status == "completed" {
			c.add(o, "refused as not refundable, but transfer %s is %s", o.Target, t.Status)
		}
	default:
		c.add(o, "unexpected answer %s", a)
	}
}

func (c *checker) payout(ctx context.Context, o *op, a answer) {
	id := a.field("id")
	if a.Status == http.StatusUnprocessableEntity && a.field("type") == "/problems/insufficient-funds" {
		id = a.field("payout_id")
	} else if a.Status != http.StatusCreated {
		c.add(o, "unexpected answer %s", a)
		return
	}
	var status, account, cur string
	var amount int64
	if err := c.db.QueryRow(ctx, `SELECT status, amount_minor, account_id, currency FROM payouts WHERE id = $1`, id).
		Scan(&status, &amount, &account, &cur); err != nil {
		c.add(o, "payout %s answered %d is not in the ledger (%v)", id, a.Status, err)
		return
	}
	switch {
	case amount != o.Amount:
		c.add(o, "payout %s holds %d, the request asked %d", id, amount, o.Amount)
	case account != o.From || cur != currency:
		c.add(o, "payout %s is from %s in %s, the request asked %s in %s", id, account, cur, o.From, currency)
	case a.Status == http.StatusUnprocessableEntity && status != "failed":
		c.add(o, "payout %s refused for funds is %s", id, status)
	case status == "processing":
		c.add(o, "payout %s still processing after the drain", id)
	}
}

// authorization checks an authorization's answer against the ledger: held (201) or refused for
// funds, of the amount and between the accounts asked, and ended after the drain.
func (c *checker) authorization(ctx context.Context, o *op, a answer) {
	id := a.field("id")
	if a.Status == http.StatusUnprocessableEntity && a.field("type") == "/problems/insufficient-funds" {
		id = a.field("authorization_id")
	} else if a.Status != http.StatusCreated {
		c.add(o, "unexpected answer %s", a)
		return
	}
	var status, from, to string
	var amount int64
	if err := c.db.QueryRow(ctx, `SELECT status, amount_minor, from_account_id, to_account_id FROM authorizations WHERE id = $1`, id).
		Scan(&status, &amount, &from, &to); err != nil {
		c.add(o, "authorization %s answered %d is not in the ledger (%v)", id, a.Status, err)
		return
	}
	switch {
	case amount != o.Amount || from != o.From || to != o.To:
		c.add(o, "authorization %s holds %d from %s for %s, the request asked %d from %s for %s", id, amount, from, to, o.Amount, o.From, o.To)
	case a.Status == http.StatusUnprocessableEntity && status != "rejected":
		c.add(o, "authorization %s refused for funds is %s", id, status)
	case a.Status == http.StatusCreated && status != "captured" && status != "voided" && status != "expired":
		c.add(o, "authorization %s is %s after the drain", id, status)
	}
}

// decision checks a capture's or void's answer against the ledger: one that won (200) left the
// authorization as it asked, with the capture's entries; one that lost (422) found it ended.
func (c *checker) decision(ctx context.Context, o *op, a answer) {
	var status string
	var captured int64
	var entries int
	if err := c.db.QueryRow(ctx, `SELECT status, amount_captured_minor, (SELECT count(*) FROM entries WHERE transfer_id = a.id)
		FROM authorizations a WHERE id = $1`, o.Target).Scan(&status, &captured, &entries); err != nil {
		c.add(o, "authorization %s is not in the ledger (%v)", o.Target, err)
		return
	}
	want := map[string]string{kindCapture: "captured", kindVoid: "voided"}[o.Kind]
	switch {
	case a.Status == http.StatusOK && status != want:
		c.add(o, "a %s answered 200, but authorization %s is %s", o.Kind, o.Target, status)
	case a.Status == http.StatusOK && o.Kind == kindCapture && (entries != 2 || (o.Amount != 0 && captured != o.Amount)):
		c.add(o, "a capture of %d answered 200, but authorization %s captured %d with %d entries", o.Amount, o.Target, captured, entries)
	case a.Status == http.StatusUnprocessableEntity && a.field("type") == "/problems/authorization-not-pending":
		if status == "authorized" || status == "pending" || a.field("authorization_status") == "authorized" {
			c.add(o, "refused as not pending, but authorization %s is %s", o.Target, status)
		}
	case a.Status != http.StatusOK:
		c.add(o, "unexpected answer %s", a)
	}
}

// startedTooLate reports a scheduled transfer refused as the contract says (400, start_at no
// longer now or later) because none of its attempts got through until request.StartAtSlack past
// its start_at: then nothing may have been claimed under its key.
func (c *checker) startedTooLate(ctx context.Context, o *op, a answer) bool {
	var body struct {
		StartAt time.Time `json:"start_at"`
	}
	if a.Status != http.StatusBadRequest || !strings.Contains(a.Body, `"field":"start_at"`) ||
		json.Unmarshal([]byte(o.Body), &body) != nil || o.End.Sub(body.StartAt) < request.StartAtSlack {
		return false
	}
	var claims int
	if err := c.db.QueryRow(ctx, `SELECT count(*) FROM idempotency_records WHERE route = $1 AND key = $2`,
		idempotency.RouteScheduledTransfers, o.Key).Scan(&claims); err != nil || claims > 0 {
		c.add(o, "answered %s, yet its key has %d claims (%v)", a, claims, err)
	}
	return true
}

// scheduled checks a scheduled transfer's answer against the ledger: the schedule asked for,
// ended after the drain (completed with all its occurrences started, or cancelled), and each of
// its occurrences started exactly one transfer, final, of the amount between the accounts asked.
func (c *checker) scheduled(ctx context.Context, o *op, a answer) {
	id := a.field("id")
	if c.startedTooLate(ctx, o, a) {
		return
	}
	if a.Status != http.StatusCreated || a.field("status") != "active" {
		c.add(o, "unexpected answer %s", a)
		return
	}
	var status, from, to string
	var amount int64
	var count, started int
	if err := c.db.QueryRow(ctx, `SELECT status, amount_minor, from_account_id, to_account_id, count, occurrences
		FROM scheduled_transfers WHERE id = $1`, id).Scan(&status, &amount, &from, &to, &count, &started); err != nil {
		c.add(o, "scheduled transfer %s answered %d is not in the ledger (%v)", id, a.Status, err)
		return
	}
	switch {
	case amount != o.Amount || from != o.From || to != o.To || count != o.Count:
		c.add(o, "scheduled transfer %s moves %d from %s to %s %d times, the request asked %d from %s to %s %d times",
			id, amount, from, to, count, o.Amount, o.From, o.To, o.Count)
	case status == "completed" && started != count, status != "completed" && status != "cancelled":
		c.add(o, "scheduled transfer %s is %s after %d of %d occurrences, after the drain", id, status, started, count)
	}
	rows, _ := c.db.Query(ctx, `SELECT t.id, t.occurrence FROM transfers t WHERE t.scheduled_transfer_id = $1 ORDER BY t.occurrence`, id)
	var ids []string
	var numbers []int
	var tid string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&tid, &n}, func() error { ids, numbers = append(ids, tid), append(numbers, n); return nil }); err != nil {
		c.add(o, "reading the occurrences of %s: %v", id, err)
		return
	}
	if len(numbers) != started {
		c.add(o, "scheduled transfer %s started %d occurrences, which made %d transfers (%v)", id, started, len(numbers), numbers)
	}
	for i, n := range numbers {
		if n != i+1 {
			c.add(o, "scheduled transfer %s's occurrences are %v, not 1 to %d", id, numbers, started)
			break
		}
		p, _ := c.posting(ctx, ids[i])
		status, entries := "completed", 2
		if p.Status == "rejected" {
			status, entries = "rejected", 0
		}
		c.posted(ctx, o, ids[i], status, entries)
	}
}

// cancel checks a cancellation's answer against the ledger: 200 with the schedule cancelled as
// the ledger holds it (no occurrence started after it), or 422 for one that had completed.
func (c *checker) cancel(ctx context.Context, o *op, a answer) {
	var status string
	var started int
	if err := c.db.QueryRow(ctx, `SELECT status, occurrences FROM scheduled_transfers WHERE id = $1`, o.Target).
		Scan(&status, &started); err != nil {
		c.add(o, "scheduled transfer %s is not in the ledger (%v)", o.Target, err)
		return
	}
	var shown struct {
		Status      string `json:"status"`
		Occurrences int    `json:"occurrences"`
	}
	_ = json.Unmarshal([]byte(a.Body), &shown)
	switch {
	case a.Status == http.StatusOK && (status != "cancelled" || shown.Status != "cancelled" || shown.Occurrences != started):
		c.add(o, "a cancel answered %s, but scheduled transfer %s is %s after %d occurrences", a, o.Target, status, started)
	case a.Status == http.StatusUnprocessableEntity && a.field("type") == "/problems/scheduled-transfer-not-active":
		if status != "completed" {
			c.add(o, "refused as not active, but scheduled transfer %s is %s", o.Target, status)
		}
	case a.Status != http.StatusOK:
		c.add(o, "unexpected answer %s", a)
	}
}

// posted checks that the transfer or refund id is in the ledger with status and n entries, of
// the amount asked (a refund of "all that remains" may be any), between the accounts the
// workload planned, in its currency.
func (c *checker) posted(ctx context.Context, o *op, id, status string, n int) {
	p, ok := c.posting(ctx, id)
	switch {
	case !ok:
		c.add(o, "%s %s answered %s is not in the ledger", o.Kind, id, status)
	case p.Status != status || p.Entries != n:
		c.add(o, "%s %s answered %s is %s with %d entries", o.Kind, id, status, p.Status, p.Entries)
	case o.Amount != 0 && p.Amount != o.Amount:
		c.add(o, "%s %s moved %d, the request asked %d", o.Kind, id, p.Amount, o.Amount)
	case p.From != o.From || p.To != o.To || p.Currency != currency:
		c.add(o, "%s %s moves %s from %s to %s, the workload asked %s from %s to %s", o.Kind, id, p.Currency, p.From, p.To,
			currency, o.From, o.To)
	case o.Kind == kindRefund && p.RefundOf != o.Target:
		c.add(o, "refund %s refunds %s, not %s", id, p.RefundOf, o.Target)
	}
}

// ledger checks what must hold of the whole: every invariant of `payments reconcile`, with the
// bank's own statement (one payment per paid payout, the same outcome on both sides); nothing
// left pending, held or running past the drain.
func (c *checker) ledger(ctx context.Context) {
	statement, err := c.statement(ctx)
	if err != nil {
		c.add(nil, "the bank's statement: %v", err)
	}
	report, err := ledger.Reconcile(ctx, c.db, idempotencyTTL, statement)
	if err != nil {
		c.add(nil, "reconcile: %v", err)
		return
	}
	// After the drain nothing is in flight: a ledger behind the bank now stays behind.
	if !report.OK() || len(report.StalePending) > 0 || len(report.BankInFlight) > 0 {
		var b bytes.Buffer
		report.Print(&b)
		c.add(nil, "payments reconcile:\n%s", b.String())
	}
	c.paidOnce(ctx, statement)
	for what, sql := range map[string]string{
		"transfers or refunds still pending": `SELECT count(*) FROM transfers WHERE status = 'pending'`,
		"holds still open":                   `SELECT count(*) FROM holds WHERE status = 'open'`,
		"payouts still processing":           `SELECT count(*) FROM payouts WHERE status = 'processing'`,
		"authorizations still open":          `SELECT count(*) FROM authorizations WHERE status IN ('pending', 'authorized')`,
		"scheduled transfers still active":   `SELECT count(*) FROM scheduled_transfers WHERE status IN ('pending', 'active')`,
		"claims without an answer":           `SELECT count(*) FROM idempotency_records WHERE status_code IS NULL`,
	} {
		var n int
		if err := c.db.QueryRow(ctx, sql).Scan(&n); err != nil {
			c.add(nil, "%s: %v", what, err)
		} else if n > 0 {
			c.add(nil, "%d %s after the drain", n, what)
		}
	}
	running, err := c.running(ctx)
	if err != nil {
		c.add(nil, "listing running workflows: %v", err)
	} else if running > 0 {
		c.add(nil, "%d transfer, refund, payout, payin, authorization or scheduled-transfer workflows still running after the drain", running)
	}
}

// runningWorkflows counts the open runs of the operations (not the webhook deliveries and
// Schedules, which run for ever).
func runningWorkflows(ctx context.Context, s *system) (int64, error) {
	resp, err := s.temporal.Client().CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Query: "ExecutionStatus = 'Running' AND WorkflowType IN ('Transfer', 'Payout', 'Payin', 'Authorization', 'ScheduledTransfer')"})
	return resp.GetCount(), err
}

// feedEvent is an event as the feed shows it.
type feedEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// feed reads each owner's events through the API, as a consumer resuming from its cursor
// would, and holds them to the ledger: each event once, every event of the owner's there, in
// commit order. (Reconcile's invariant 9 holds the events to the committed changes.) It
// returns each owner's feed as read (nil for one it could not read).
func (c *checker) feed(ctx context.Context, w *workload, api string) [][]feedEvent {
	feeds := make([][]feedEvent, len(w.owners))
	for i, o := range w.owners {
		events, err := readFeed(ctx, w.client, api, o.Key)
		if err != nil {
			c.add(nil, "owner %d's feed: %v", i, err)
			continue
		}
		seen := map[string]bool{}
		ids := make([]string, 0, len(events))
		for _, e := range events {
			if seen[e.ID] {
				c.add(nil, "owner %d's feed shows event %s twice", i, e.ID)
			}
			seen[e.ID] = true
			ids = append(ids, e.ID)
		}
		var want int
		var inOrder bool
		if err := c.db.QueryRow(ctx, `SELECT count(*), COALESCE(array_agg(e.id ORDER BY e.seq) = $2::text[], true)
			FROM event_owners eo JOIN events e ON e.seq = eo.event_seq WHERE eo.owner_id = $1`, o.ID, ids).Scan(&want, &inOrder); err != nil {
			c.add(nil, "owner %d's events: %v", i, err)
		} else if want != len(ids) || !inOrder {
			c.add(nil, "owner %d's feed shows %d events, the ledger has %d for it (in the same order: %v)", i, len(ids), want, inOrder)
		}
		feeds[i] = events
	}
	return feeds
}

// readFeed pages through the feed of the owner of key, from its start, until a page is empty
// or has no next cursor.
func readFeed(ctx context.Context, client *http.Client, api, key string) ([]feedEvent, error) {
	var events []feedEvent
	after := ""
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/events?limit=200&after="+after, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return events, err
		}
		var page struct {
			Data       []feedEvent `json:"data"`
			NextCursor *string     `json:"next_cursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return events, fmt.Errorf("answered %d (%v)", resp.StatusCode, err)
		}
		events = append(events, page.Data...)
		if page.NextCursor == nil || len(page.Data) == 0 {
			return events, nil
		}
		after = *page.NextCursor
	}
}

// endpoint checks that endpoint e, as its creation was answered, is in the ledger: its owner's,
// at the URL and for the event types asked.
func (c *checker) endpoint(ctx context.Context, w *workload, e *endpoint) {
	if len(e.Op.Answers) == 0 {
		return // reported with the operation
	}
	var ownerID, url string
	var types []string
	err := c.db.QueryRow(ctx, `SELECT owner_id, url, event_types FROM webhook_endpoints WHERE id = $1 AND deleted_at IS NULL`, e.ID).
		Scan(&ownerID, &url, &types)
	want := e.Types
	if want == nil {
		want = []string{"*"}
	}
	switch {
	case err != nil:
		c.add(e.Op, "endpoint %s answered %d is not in the ledger (%v)", e.ID, e.Op.Answers[0].Status, err)
	case ownerID != w.owners[e.Owner].ID || url != w.recv.url+e.Path || !slices.Equal(types, want):
		c.add(e.Op, "endpoint %s is owner %s's, at %s, for %v; the request asked owner %s's, at %s, for %v", e.ID, ownerID, url,
			types, w.owners[e.Owner].ID, w.recv.url+e.Path, want)
	}
}

// webhooks waits, at most within, until every endpoint has received every event of its
// owner's feed it subscribes to (after the drain, deliveries may still be under way or waiting
// for their backoff), then holds what the receiver got to the feeds (docs/contract.md §7, ADR
// 0009): each such event reached the endpoint at least once; first deliveries came in the
// feed's order (an endpoint gets its events in commit order, one at a time, the next only
// once the one before is delivered; a repeat of an earlier event may come at any time, at least
// once); nothing arrived that is not in the owner's feed, or of a type it does not subscribe
// to; nothing arrived unsigned or badly signed. It returns how long the wait took.
func (c *checker) webhooks(ctx context.Context, w *workload, feeds [][]feedEvent, b deliveryBounds) time.Duration {
	start := time.Now()
	watch := newDeliveryWatch(start)
	for ctx.Err() == nil && !watch.settled(time.Now(), w.backlog(feeds), b) {
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	now := time.Now()
	waited := now.Sub(start)
	for _, e := range w.hooks {
		if feeds[e.Owner] != nil {
			c.deliveries(ctx, e, feeds[e.Owner], w.recv.received(e.Path), waited, now.Sub(watch.moved[e.Path]))
		}
	}
	for _, bad := range w.recv.refused() {
		c.add(nil, "%s", bad)
	}
	return waited
}

// deliveryBounds are how long the checker waits for the endpoints' backlogs after the drain. It
// asserts that deliveries go on, not how fast: an endpoint whose backlog has not shrunk for Stall
// is stuck (a run that ended, a lost wake, an event that can never be sent), and one still
// shrinking after Cap has not caught up. How long they took is reported (Webhooks.Waited).
type deliveryBounds struct{ Stall, Cap time.Duration }

// deliveryWatch follows each endpoint's backlog (the events due to it that have not reached it
// yet) while it drains: when each last shrank.
type deliveryWatch struct {
	start time.Time
	left  map[string]int       // by path: the backlog at the last look
	moved map[string]time.Time // by path: when it last shrank (the start, at first)
}

func newDeliveryWatch(start time.Time) *deliveryWatch {
	return &deliveryWatch{start: start, left: map[string]int{}, moved: map[string]time.Time{}}
}

// settled takes the backlogs as of now and tells whether waiting longer is useless: every
// endpoint has all its events, or has not moved for b.Stall, or b.Cap has passed.
func (d *deliveryWatch) settled(now time.Time, backlog map[string]int, b deliveryBounds) bool {
	settled := true
	for path, n := range backlog {
		switch prev, seen := d.left[path]; {
		case !seen:
			d.moved[path] = d.start
		case n < prev:
			d.moved[path] = now
		}
		d.left[path] = n
		if n > 0 && now.Sub(d.moved[path]) < b.Stall {
			settled = false
		}
	}
	return settled || now.Sub(d.start) >= b.Cap
}

// backlog is, for each endpoint (by path), how many of the events due to it have not reached it.
func (w *workload) backlog(feeds [][]feedEvent) map[string]int {
	out := map[string]int{}
	for _, e := range w.hooks {
		got := map[string]bool{}
		for _, r := range w.recv.received(e.Path) {
			got[r.ID] = true
		}
		n := 0
		for _, ev := range due(e, feeds[e.Owner]) {
			if !got[ev.ID] {
				n++
			}
		}
		out[e.Path] = n
	}
	return out
}

// due is what endpoint e must receive of its owner's feed: the events of the types it
// subscribes to (it was created before its owner's first event).
func due(e *endpoint, feed []feedEvent) []feedEvent {
	var out []feedEvent
	for _, ev := range feed {
		if e.Types == nil || slices.Contains(e.Types, ev.Type) {
			out = append(out, ev)
		}
	}
	return out
}

// deliveries holds what endpoint e received to its owner's feed.
func (c *checker) deliveries(ctx context.Context, e *endpoint, feed []feedEvent, got []receipt, waited, idle time.Duration) {
	types := map[string]string{}
	for _, ev := range feed {
		types[ev.ID] = ev.Type
	}
	position := map[string]int{}
	for i, ev := range due(e, feed) {
		position[ev.ID] = i
	}
	first := map[string]bool{}
	last := -1 // the feed position of the latest first delivery
	lastID := ""
	for _, r := range got {
		if first[r.ID] {
			continue // a repeat: at least once
		}
		first[r.ID] = true
		typ, inFeed := types[r.ID]
		p, isDue := position[r.ID]
		switch {
		case !inFeed:
			c.add(nil, "endpoint %s (%s, owner %d) received event %s (%s), which is not in its owner's feed", e.ID, e.Path, e.Owner, r.ID, r.Type)
		case !isDue:
			c.add(nil, "endpoint %s (%s, owner %d) received event %s of type %s, which it does not subscribe to (%v)", e.ID, e.Path, e.Owner, r.ID, typ, e.Types)
		case p < last:
			c.add(nil, "endpoint %s (%s, owner %d) first received event %s (its %d. due) after %s (its %d. due): not in the feed's order",
				e.ID, e.Path, e.Owner, r.ID, p+1, lastID, last+1)
		default:
			last, lastID = p, r.ID
		}
	}
	var missing []feedEvent
	for _, ev := range due(e, feed) {
		if !first[ev.ID] {
			missing = append(missing, ev)
		}
	}
	if len(missing) > 0 {
		var status string
		var attempts int
		_ = c.db.QueryRow(ctx, `SELECT d.status || COALESCE(' (' || d.last_error || ')', ''), d.attempts FROM webhook_deliveries d
			JOIN events ev ON ev.seq = d.event_seq WHERE d.endpoint_id = $1 AND ev.id = $2`, e.ID, missing[0].ID).Scan(&status, &attempts)
		c.add(nil, "%d of the %d events due to endpoint %s (%s, owner %d) never reached it, waited for %s after the drain, the last %s without a new one; the first, %s (%s), is %q in its outbox after %d attempts",
			len(missing), len(position), e.ID, e.Path, e.Owner, waited.Round(time.Second), idle.Round(time.Second), missing[0].ID, missing[0].Type, status, attempts)
	}
}

// paidOnce holds every payout to the bank's statement directly: a paid or returned payout has
// exactly one bank payment, under its reference, with its outcome; a failed one none that was
// paid or returned. (Invariant 8 starts from the payments the ledger recorded.)
func (c *checker) paidOnce(ctx context.Context, statement []bank.Payment) {
	if statement == nil {
		return // reported
	}
	byRef := map[string][]bank.Payment{}
	for _, p := range statement {
		byRef[p.Reference] = append(byRef[p.Reference], p)
	}
	rows, err := c.db.Query(ctx, `SELECT id, status FROM payouts`)
	if err != nil {
		c.add(nil, "payouts: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			c.add(nil, "payouts: %v", err)
			return
		}
		ps := byRef[id]
		switch {
		case (status == "paid" || status == "returned") && (len(ps) != 1 || ps[0].Status != status):
			c.add(nil, "payout %s is %s; the bank holds %d payments for it: %+v", id, status, len(ps), ps)
		case status == "failed" && len(ps) > 1,
			status == "failed" && len(ps) == 1 && ps[0].Status != bank.Failed:
			c.add(nil, "payout %s failed; the bank holds %+v", id, ps)
		}
	}
}

// lostCommits counts the operations whose transfer, refund or payout committed while one of
// their attempts was under way and lost its answer: the window between "committed" and
// "answered" was hit, and the client learned the outcome from a later attempt.
func (c *checker) lostCommits(ctx context.Context, w *workload) int {
	n := 0
	for _, o := range w.ops {
		if len(o.Lost) == 0 || len(o.Answers) == 0 || o.Variant == reused || o.Variant == again {
			continue
		}
		a := o.Answers[0]
		id := cmp.Or(a.field("id"), a.field("refund_id"), a.field("payout_id"))
		if o.Kind == kindTransfer {
			id = cmp.Or(a.field("id"), a.field("transfer_id"))
		}
		var at time.Time
		if err := c.db.QueryRow(ctx, `SELECT COALESCE((SELECT completed_at FROM transfers WHERE id = $1),
			(SELECT created_at FROM holds WHERE payout_id = $1), (SELECT failed_at FROM payouts WHERE id = $1))`, id).Scan(&at); err != nil {
			continue
		}
		for _, l := range o.Lost {
			if !at.Before(l.From) && !at.After(l.To) {
				n++
				break
			}
		}
	}
	return n
}
