package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// ScheduledTransfer is a scheduled or recurring transfer as the API shows it (docs/contract.md
// §9): Count occurrences (one without an Interval; until cancelled with one and no Count), the
// first at StartAt, each an ordinary transfer.
type ScheduledTransfer struct {
	ID            string                  `json:"id"`
	Status        ScheduledTransferStatus `json:"status"`
	FromAccountID string                  `json:"from_account_id"`
	ToAccountID   string                  `json:"to_account_id"`
	AmountMinor   int64                   `json:"amount_minor"`
	Currency      string                  `json:"currency"`
	StartAt       time.Time               `json:"start_at"`
	Interval      *string                 `json:"interval"` // as the request gave it; null: once
	Count         *int                    `json:"count"`    // as the request gave it; null: once, or until cancelled
	NextRunAt     *time.Time              `json:"next_run_at"`
	Occurrences   int                     `json:"occurrences"` // started so far
	Description   string                  `json:"description"`
	Metadata      Metadata                `json:"metadata"`
	WorkflowID    string                  `json:"workflow_id"`
	CreatedAt     time.Time               `json:"created_at"`
	CompletedAt   *time.Time              `json:"completed_at"`
	CancelledAt   *time.Time              `json:"cancelled_at"`
	OwnerID       string                  `json:"-"`
	IntervalMS    int64                   `json:"-"` // Interval in milliseconds; 0 for none
}

// Limit is how many occurrences st has in all, or 0 for no limit (until cancelled).
func (st ScheduledTransfer) Limit() int {
	switch {
	case st.Count != nil:
		return *st.Count
	case st.IntervalMS == 0:
		return 1
	}
	return 0
}

// Due is when occurrence n (from 1) of st is due.
func (st ScheduledTransfer) Due(n int) time.Time {
	return st.StartAt.Add(time.Duration(n-1) * time.Duration(st.IntervalMS) * time.Millisecond)
}

// ScheduledAnswer is the answer to a scheduled transfer's request, in the shape of the edge
// that received it (api.ScheduledTransferAnswer): stored when its run activates it.
type ScheduledAnswer func(ScheduledTransfer) idempotency.Response

// ErrScheduleEnded is a cancellation of a scheduled transfer that has completed: all its
// occurrences have started, and none is left to cancel.
var ErrScheduleEnded = errors.New("the scheduled transfer has completed")

const scheduledColumns = `id, status, from_account_id, to_account_id, amount_minor, currency, start_at, interval_text,
	count, next_run_at, occurrences, description, metadata, workflow_id, created_at, completed_at, cancelled_at,
	owner_id, interval_ms`

func scanScheduled(row pgx.Row) (ScheduledTransfer, error) {
	var st ScheduledTransfer
	err := row.Scan(&st.ID, &st.Status, &st.FromAccountID, &st.ToAccountID, &st.AmountMinor, &st.Currency, &st.StartAt,
		&st.Interval, &st.Count, &st.NextRunAt, &st.Occurrences, &st.Description, &st.Metadata, &st.WorkflowID,
		&st.CreatedAt, &st.CompletedAt, &st.CancelledAt, &st.OwnerID, &st.IntervalMS)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	st.StartAt, st.CreatedAt = UTC(st.StartAt), UTC(st.CreatedAt)
	utcAll(&st.NextRunAt, &st.CompletedAt, &st.CancelledAt)
	return st, err
}

// InsertScheduledTransfer records a scheduled transfer, pending, when its request is claimed
// and before its run starts, so that it can be read at once. Its run activates it.
func InsertScheduledTransfer(ctx context.Context, q database.Querier, st ScheduledTransfer) error {
	_, err := q.Exec(ctx, `
		INSERT INTO scheduled_transfers (id, status, owner_id, from_account_id, to_account_id, amount_minor, currency,
			start_at, interval_text, interval_ms, count, next_run_at, workflow_id, description, metadata)
		VALUES ($1, 'pending', $2, $3, $4, $5, $6, $7, $8, $9, $10, $7, $11, $12, $13)
		ON CONFLICT (id) DO NOTHING`,
		st.ID, st.OwnerID, st.FromAccountID, st.ToAccountID, st.AmountMinor, st.Currency, st.StartAt, st.Interval,
		st.IntervalMS, st.Count, st.WorkflowID, st.Description, st.Metadata.stored())
	return err
}

// ClaimedScheduledTransfer is scheduled transfer id as claimed (ErrNotFound when its claim was
// withdrawn).
func ClaimedScheduledTransfer(ctx context.Context, q database.Querier, id string) (ScheduledTransfer, error) {
	return scanScheduled(q.QueryRow(ctx, `SELECT `+scheduledColumns+` FROM scheduled_transfers WHERE id = $1`, id))
}

// ScheduledTransfersUnder counts the scheduled transfers made under workflow ID id: one per use
// of its key.
func ScheduledTransfersUnder(ctx context.Context, q database.Querier, id string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM scheduled_transfers WHERE workflow_id = $1`, id).Scan(&n)
	return n, err
}

// ScheduledTransfer returns scheduled transfer id if ownerID holds either of its accounts (any
// owner when empty).
func (l *Ledger) ScheduledTransfer(ctx context.Context, ownerID, id string) (ScheduledTransfer, error) {
	return scanScheduled(l.DB.QueryRow(ctx, `
		SELECT `+scheduledColumns+` FROM scheduled_transfers t
		WHERE id = $1 AND ($2 = '' OR EXISTS (SELECT 1 FROM accounts a
			WHERE a.id IN (t.from_account_id, t.to_account_id) AND a.owner_id = $2))`, id, ownerID))
}

// ActivateScheduledTransfer activates scheduled transfer id once however often it is called
// (pending becomes active, with its event), and stores its answer under scope in the same
// transaction: the 201 its request is answered with.
func (l *Ledger) ActivateScheduledTransfer(ctx context.Context, id string, scope idempotency.Scope, replayFor config.Duration,
	answer ScheduledAnswer) (st ScheduledTransfer, resp idempotency.Response, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if st, err = lockScheduled(ctx, tx, id); err != nil {
			return err
		}
		resp, err = decided(ctx, tx, scope, id, replayFor, func() (idempotency.Response, error) {
			if st.Status == ScheduledPending {
				if st, err = setScheduled(ctx, tx, id, `status = 'active'`); err != nil {
					return idempotency.Response{}, err
				}
				o.scheduled(st)
			}
			return answer(st), nil
		})
		return err
	})
	return st, resp, err
}

// BeginOccurrence starts occurrence n (from 1) of scheduled transfer id, if it may start: it is
// the next one and the schedule is active, decided under the schedule's lock, so that a
// cancellation and an occurrence racing are decided once. begun is true for one started now or
// before (n at most the occurrences so far: fired again, its transfer is the same); false when
// the schedule has ended (cancelled: no occurrence starts after it). The last occurrence
// completes the schedule.
func (l *Ledger) BeginOccurrence(ctx context.Context, id string, n int) (st ScheduledTransfer, begun bool, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if st, err = lockScheduled(ctx, tx, id); err != nil {
			return err
		}
		switch limit := st.Limit(); {
		case n >= 1 && n <= st.Occurrences:
			begun = true
			return nil
		case st.Status != ScheduledActive:
			return nil
		case n != st.Occurrences+1 || (limit > 0 && n > limit):
			return fmt.Errorf("%w: occurrence %d of scheduled transfer %s, which has had %d of %d", ErrInvalidPosting,
				n, id, st.Occurrences, limit)
		case n == limit:
			st, err = setScheduled(ctx, tx, id, `status = 'completed', completed_at = now(), next_run_at = NULL, occurrences = $2`, n)
			o.scheduled(st)
		default:
			st, err = setScheduled(ctx, tx, id, `occurrences = $2, next_run_at = $3`, n, st.Due(n+1))
		}
		begun = err == nil
		return err
	})
	return st, begun, err
}

// CancelScheduledTransfer cancels scheduled transfer id of ownerID (the owner of its source):
// no occurrence starts after it; those started go on as the transfers they are. Cancelling a
// cancelled one changes nothing; a completed one is ErrScheduleEnded.
func (l *Ledger) CancelScheduledTransfer(ctx context.Context, ownerID, id string) (st ScheduledTransfer, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if st, err = lockScheduled(ctx, tx, id); err != nil {
			return err
		}
		switch {
		case st.OwnerID != ownerID:
			return ErrNotFound
		case st.Status == ScheduledCompleted:
			return ErrScheduleEnded
		case st.Status == ScheduledCancelled:
			return nil
		}
		if st, err = setScheduled(ctx, tx, id, `status = 'cancelled', cancelled_at = now(), next_run_at = NULL`); err == nil {
			o.scheduled(st)
		}
		return err
	})
	return st, err
}

// OccurrenceTransfer is the transfer of occurrence n of scheduled transfer id (ErrNotFound when
// it has none yet).
func (l *Ledger) OccurrenceTransfer(ctx context.Context, id string, n int) (Transfer, error) {
	return scanTransfer(l.DB.QueryRow(ctx, `SELECT `+transferColumns+` FROM transfers
		WHERE scheduled_transfer_id = $1 AND occurrence = $2`, id, n))
}

// OpenScheduledTransfers calls f for every scheduled transfer still pending or active that was
// claimed more than olderThan ago, oldest first, a page at a time: those whose run the recovery
// pass looks at.
func (l *Ledger) OpenScheduledTransfers(ctx context.Context, olderThan time.Duration, f func([]ScheduledTransfer) error) error {
	return olderPages(ctx, l.DB, `SELECT `+scheduledColumns+` FROM scheduled_transfers WHERE status IN ('pending', 'active')`,
		olderThan, func(row pgx.CollectableRow) (ScheduledTransfer, error) { return scanScheduled(row) },
		func(st ScheduledTransfer) (time.Time, string) { return st.CreatedAt, st.ID }, f)
}

// ScheduledTransfers lists the scheduled transfers that touch ownerID's accounts (or
// f.AccountID, one of them), newest first, by keyset, as Transfers lists transfers.
func (l *Ledger) ScheduledTransfers(ctx context.Context, ownerID string, f Filter) (Page[ScheduledTransfer], error) {
	return list(ctx, l, ownerID, f, touching("scheduled_transfers", scheduledColumns, ""),
		func(row pgx.CollectableRow) (ScheduledTransfer, error) { return scanScheduled(row) },
		func(st ScheduledTransfer) keyset { return keyset{st.CreatedAt, st.ID} })
}

func lockScheduled(ctx context.Context, tx pgx.Tx, id string) (ScheduledTransfer, error) {
	return scanScheduled(tx.QueryRow(ctx, `SELECT `+scheduledColumns+` FROM scheduled_transfers WHERE id = $1 FOR UPDATE`, id))
}

// setScheduled sets what set says ($2 … are args) of scheduled transfer id and returns it.
func setScheduled(ctx context.Context, tx pgx.Tx, id, set string, args ...any) (ScheduledTransfer, error) {
	return scanScheduled(tx.QueryRow(ctx, `UPDATE scheduled_transfers SET `+set+` WHERE id = $1 RETURNING `+scheduledColumns,
		append([]any{id}, args...)...))
}
