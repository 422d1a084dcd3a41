package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/database"
)

// Types of event (docs/contract.md §7, §9): one per state change of a transfer, payout, payin,
// refund, authorization or scheduled transfer.
const (
	EventTransferCompleted = "transfer.completed"
	EventTransferRejected  = "transfer.rejected"
	EventTransferFailed    = "transfer.failed"
	EventPayoutPending     = "payout.pending_approval" // held, waiting for a second key (§9)
	EventPayoutProcessing  = "payout.processing"
	EventPayoutPaid        = "payout.paid"
	EventPayoutFailed      = "payout.failed"
	EventPayoutReturned    = "payout.returned"
	EventPayinReceived     = "payin.received"
	EventRefundCompleted   = "refund.completed"

	EventAuthorizationCreated  = "authorization.created"
	EventAuthorizationCaptured = "authorization.captured"
	EventAuthorizationVoided   = "authorization.voided"
	EventAuthorizationExpired  = "authorization.expired"

	EventScheduledCreated   = "scheduled_transfer.created"
	EventScheduledCompleted = "scheduled_transfer.completed"
	EventScheduledCancelled = "scheduled_transfer.cancelled"
)

// EventTypes are the types an event may have, in the contract's order.
var EventTypes = []string{EventTransferCompleted, EventTransferRejected, EventTransferFailed,
	EventPayoutPending, EventPayoutProcessing, EventPayoutPaid, EventPayoutFailed, EventPayoutReturned, EventPayinReceived,
	EventRefundCompleted, EventAuthorizationCreated, EventAuthorizationCaptured, EventAuthorizationVoided,
	EventAuthorizationExpired, EventScheduledCreated, EventScheduledCompleted, EventScheduledCancelled}

// Event is an event as the feed shows it and webhooks deliver it.
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// An owner's feed is in commit order without a lock that every change shares: a transaction
// locks the rows of the owners who will see its events (lockOwnersSQL: in id order, after every
// other lock it takes) before its events take their seqs, and holds them until it commits. Each
// owner's events therefore take their seqs one committed transaction after another, so seq order
// is commit order within every owner's feed and every endpoint's outbox (an endpoint is one
// owner's), while changes seen by disjoint owners never wait on each other (ADR 0012).
// FOR NO KEY UPDATE leaves the owner free to be referenced (an account or key inserted) meanwhile.
const (
	lockOwnersSQL = `SELECT id FROM owners WHERE id IN (
		SELECT owner_id FROM accounts WHERE id = ANY($1) AND kind = 'customer') ORDER BY id FOR NO KEY UPDATE`
	lockOwnerSQL = `SELECT id FROM owners WHERE id = $1 FOR NO KEY UPDATE`
)

// lockOwner takes ownerID's feed lock for the rest of tx: the endpoint created or deleted under
// it gets exactly the owner's events that commit after (or, deleted, before) it.
func lockOwner(ctx context.Context, tx database.Querier, ownerID string) error {
	_, err := tx.Exec(ctx, lockOwnerSQL, ownerID)
	return err
}

// change is an event a transaction appends: of type typ, about the object with id objectID
// (shown as it is now), seen by the owners of accounts.
type change struct {
	typ      string
	objectID string
	object   any
	accounts []string
}

// outbox collects the events of one transaction, written when it is about to commit.
type outbox struct{ changes []change }

func (o *outbox) add(typ, objectID string, object any, accounts ...string) {
	o.changes = append(o.changes, change{typ, objectID, object, accounts})
}

// transferEvent records t's move to a final status.
func (o *outbox) transfer(t Transfer) {
	o.add("transfer."+string(t.Status), t.ID, t, t.FromAccountID, t.ToAccountID)
}

// posting records the change of a transfer or refund t: a transfer's move to any final status,
// a refund's completion (the contract has no event for a refund refused or failed).
func (o *outbox) posting(t Transfer) {
	switch {
	case t.Kind == KindRefund && t.Status == TransferCompleted:
		o.add(EventRefundCompleted, t.ID, RefundView(t), t.FromAccountID, t.ToAccountID)
	case t.Kind != KindRefund:
		o.transfer(t)
	}
}

// payout records po's move to its current status (its money held, paid, failed, returned).
func (o *outbox) payout(po Payout) {
	o.add("payout."+string(po.Status), po.ID, po, po.AccountID)
}

// authorization records a's move to its current status (held, captured, voided, expired), seen
// by the owners of both its accounts.
func (o *outbox) authorization(a Authorization) {
	typ := "authorization." + string(a.Status)
	if a.Status == AuthorizationAuthorized {
		typ = EventAuthorizationCreated
	}
	o.add(typ, a.ID, a, a.FromAccountID, a.ToAccountID)
}

// scheduled records st's move to its current status (activated: created; completed;
// cancelled), seen by the owners of both its accounts.
func (o *outbox) scheduled(st ScheduledTransfer) {
	typ := "scheduled_transfer." + string(st.Status)
	if st.Status == ScheduledActive {
		typ = EventScheduledCreated
	}
	o.add(typ, st.ID, st, st.FromAccountID, st.ToAccountID)
}

// flushEvents writes o's events, whom each is for, and the deliveries they are due, and returns
// the endpoints that got deliveries. It locks the owners who see them first, in one round trip
// with the inserts after it, so that the locks are held for little more than the commit.
func flushEvents(ctx context.Context, tx pgx.Tx, o *outbox) ([]string, error) {
	if len(o.changes) == 0 {
		return nil, nil
	}
	var accounts []string
	for _, c := range o.changes {
		accounts = append(accounts, c.accounts...)
	}
	batch := &pgx.Batch{}
	batch.Queue(lockOwnersSQL, accounts)
	var woken []string
	now := UTC(time.Now())
	for _, c := range o.changes { // few per transaction: one, or two when a payout's hold and answer commit together
		obj, err := json.Marshal(c.object)
		if err != nil {
			return nil, fmt.Errorf("event %s of %s: %w", c.typ, c.objectID, err)
		}
		ev := Event{ID: NewID("evt_"), Type: c.typ, CreatedAt: now}
		ev.Data.Object = obj
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		batch.Queue(`
			WITH ev AS (
				INSERT INTO events (seq, id, type, object_id, body, created_at)
				VALUES (nextval('event_seq'), $1, $2, $3, $4, $5) RETURNING seq
			), seen AS (
				INSERT INTO event_owners (owner_id, event_seq, type)
				SELECT DISTINCT a.owner_id, ev.seq, $2 FROM accounts a, ev
				WHERE a.id = ANY($6) AND a.kind = 'customer'
				RETURNING owner_id, event_seq
			)
			INSERT INTO webhook_deliveries (endpoint_id, event_seq)
			SELECT w.id, seen.event_seq FROM webhook_endpoints w JOIN seen ON w.owner_id = seen.owner_id
			WHERE w.deleted_at IS NULL AND (w.event_types @> ARRAY['*'] OR w.event_types @> ARRAY[$2::text])
			RETURNING endpoint_id`, ev.ID, c.typ, c.objectID, body, now, c.accounts).
			Query(func(rows pgx.Rows) error {
				endpoints, err := pgx.CollectRows(rows, pgx.RowTo[string])
				woken = append(woken, endpoints...)
				return err
			})
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	slices.Sort(woken)
	return slices.Compact(woken), nil
}

// EventPage is a page of the events feed, oldest first.
type EventPage struct {
	Data       []json.RawMessage `json:"data"`
	NextCursor *string           `json:"next_cursor"`
}

// ErrBadEventCursor is an `after` that names no event the caller can see.
var ErrBadEventCursor = errors.New("after names no event of yours")

// Events returns up to limit of ownerID's events that committed after the event after (from the
// first when empty), of type typ when not empty, oldest first. NextCursor is the id of the last
// one: the `after` to resume from. A page without events has none: resume with the same after.
func (l *Ledger) Events(ctx context.Context, ownerID, after, typ string, limit int) (EventPage, error) {
	var afterSeq int64
	if after != "" {
		err := l.DB.QueryRow(ctx, `SELECT e.seq FROM events e JOIN event_owners o ON o.event_seq = e.seq AND o.owner_id = $2
			WHERE e.id = $1`, after, ownerID).Scan(&afterSeq)
		if errors.Is(err, pgx.ErrNoRows) {
			return EventPage{}, ErrBadEventCursor
		}
		if err != nil {
			return EventPage{}, err
		}
	}
	rows, err := l.DB.Query(ctx, `
		SELECT e.id, e.body FROM event_owners o JOIN events e ON e.seq = o.event_seq
		WHERE o.owner_id = $1 AND o.event_seq > $2 AND ($3 = '' OR o.type = $3)
		ORDER BY o.event_seq LIMIT $4`, ownerID, afterSeq, typ, limit)
	if err != nil {
		return EventPage{}, err
	}
	defer rows.Close()
	page := EventPage{Data: []json.RawMessage{}}
	for rows.Next() {
		var id string
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return EventPage{}, err
		}
		page.Data, page.NextCursor = append(page.Data, body), &id
	}
	return page, rows.Err()
}
