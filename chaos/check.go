package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/ledger"
)

// violation is a property the run broke, about op (nil for the ledger as a whole).
type violation struct {
	Op   *op
	What string
}

// checker holds every operation's final answers to the ledger, the bank and Temporal.
type checker struct {
	db    ledgerReader
	found []violation
}

type ledgerReader interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (c *checker) add(o *op, format string, args ...any) {
	c.found = append(c.found, violation{Op: o, What: fmt.Sprintf(format, args...)})
}

// posting is what the ledger holds of a transfer or refund.
type posting struct {
	Status, Kind, RefundOf string
	Amount, Refunded       int64
	Entries                int
}

func (c *checker) posting(ctx context.Context, id string) (posting, bool) {
	var p posting
	err := c.db.QueryRow(ctx, `SELECT status, kind, COALESCE(refund_of, ''), amount_minor, amount_refunded_minor,
		(SELECT count(*) FROM entries e WHERE e.transfer_id = t.id) FROM transfers t WHERE id = $1`, id).
		Scan(&p.Status, &p.Kind, &p.RefundOf, &p.Amount, &p.Refunded, &p.Entries)
	return p, err == nil
}

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
	var status string
	var amount int64
	if err := c.db.QueryRow(ctx, `SELECT status, amount_minor FROM payouts WHERE id = $1`, id).Scan(&status, &amount); err != nil {
		c.add(o, "payout %s answered %d is not in the ledger (%v)", id, a.Status, err)
		return
	}
	switch {
	case amount != o.Amount:
		c.add(o, "payout %s holds %d, the request asked %d", id, amount, o.Amount)
	case a.Status == http.StatusUnprocessableEntity && status != "failed":
		c.add(o, "payout %s refused for funds is %s", id, status)
	case status == "processing":
		c.add(o, "payout %s still processing after the drain", id)
	}
}

// posted checks that the transfer or refund id is in the ledger with status and n entries, of
// the amount asked (a refund of "all that remains" may be any).
func (c *checker) posted(ctx context.Context, o *op, id, status string, n int) {
	p, ok := c.posting(ctx, id)
	switch {
	case !ok:
		c.add(o, "%s %s answered %s is not in the ledger", o.Kind, id, status)
	case p.Status != status || p.Entries != n:
		c.add(o, "%s %s answered %s is %s with %d entries", o.Kind, id, status, p.Status, p.Entries)
	case o.Amount != 0 && p.Amount != o.Amount:
		c.add(o, "%s %s moved %d, the request asked %d", o.Kind, id, p.Amount, o.Amount)
	case o.Kind == kindRefund && p.RefundOf != o.Target:
		c.add(o, "refund %s refunds %s, not %s", id, p.RefundOf, o.Target)
	}
}

// ledger checks what must hold of the whole: every invariant of `payments reconcile`, with the
// bank's own statement (one payment per paid payout, the same outcome on both sides); nothing
// left pending, held or running past the drain.
func (c *checker) ledger(ctx context.Context, s *system) {
	statement, err := (&bank.HTTP{BaseURL: s.bankURL}).Statement(ctx)
	if err != nil {
		c.add(nil, "the bank's statement: %v", err)
	}
	report, err := ledger.Reconcile(ctx, s.db, idempotencyTTL, statement)
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
		"claims without an answer":           `SELECT count(*) FROM idempotency_records WHERE status_code IS NULL`,
	} {
		var n int
		if err := c.db.QueryRow(ctx, sql).Scan(&n); err != nil {
			c.add(nil, "%s: %v", what, err)
		} else if n > 0 {
			c.add(nil, "%d %s after the drain", n, what)
		}
	}
	running, err := runningWorkflows(ctx, s)
	if err != nil {
		c.add(nil, "listing running workflows: %v", err)
	} else if running > 0 {
		c.add(nil, "%d transfer, refund, payout or payin workflows still running after the drain", running)
	}
}

// runningWorkflows counts the open runs of the operations (not the webhook deliveries and
// Schedules, which run for ever).
func runningWorkflows(ctx context.Context, s *system) (int64, error) {
	resp, err := s.temporal.Client().CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Query: "ExecutionStatus = 'Running' AND WorkflowType IN ('Transfer', 'Payout', 'Payin')"})
	return resp.GetCount(), err
}

// feed reads each owner's events through the API, as a consumer resuming from its cursor
// would, and holds them to the ledger: each event once, every event of the owner's there, in
// commit order. (Reconcile's invariant 9 holds the events to the committed changes.)
func (c *checker) feed(ctx context.Context, w *workload, api string) {
	for i, o := range w.owners {
		var ids []string
		seen := map[string]bool{}
		after := ""
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/events?limit=200&after="+after, nil)
			req.Header.Set("Authorization", "Bearer "+o.Key)
			resp, err := w.client.Do(req)
			if err != nil {
				c.add(nil, "owner %d's feed: %v", i, err)
				return
			}
			var page struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
				NextCursor *string `json:"next_cursor"`
			}
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				c.add(nil, "owner %d's feed: %d %v", i, resp.StatusCode, err)
				return
			}
			for _, e := range page.Data {
				if seen[e.ID] {
					c.add(nil, "owner %d's feed shows event %s twice", i, e.ID)
				}
				seen[e.ID] = true
				ids = append(ids, e.ID)
			}
			if page.NextCursor == nil || len(page.Data) == 0 {
				break
			}
			after = *page.NextCursor
		}
		var want int
		var inOrder bool
		if err := c.db.QueryRow(ctx, `SELECT count(*), COALESCE(array_agg(e.id ORDER BY e.seq) = $2::text[], true)
			FROM event_owners eo JOIN events e ON e.seq = eo.event_seq WHERE eo.owner_id = $1`, o.ID, ids).Scan(&want, &inOrder); err != nil {
			c.add(nil, "owner %d's events: %v", i, err)
		} else if want != len(ids) || !inOrder {
			c.add(nil, "owner %d's feed shows %d events, the ledger has %d for it (in the same order: %v)", i, len(ids), want, inOrder)
		}
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
