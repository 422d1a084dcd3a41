package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
)

// Posting is one transfer to post. TransferID and WorkflowID are derived from Scope. It is also
// what a transfer workflow's input holds (workflows.TransferInput), so its JSON is what histories
// hold: the scope's fields are the posting's own (OwnerID, Route, Key), and what a run's input
// does not carry is left out.
type Posting struct {
	TransferID  string
	WorkflowID  string
	From, To    string
	AmountMinor int64
	Currency    string
	Description string
	idempotency.Scope
	ReplayFor config.Duration // how long the stored response is replayed
	RunID     string          `json:"-"` // the workflow run posting it, if any: see ErrFenced
	// Kind is what the posting is: KindTransfer (the default), a refund of a transfer
	// (KindRefund, of RefundOf), or the money of a payout paid (KindPayout: it consumes the
	// payout's hold), of a payout returned, of a payin. Only transfers and refunds have an
	// idempotency scope and an answer of their own.
	Kind     string   `json:",omitempty"`
	RefundOf string   `json:",omitempty"` // the transfer a refund gives money back from
	Metadata Metadata `json:",omitempty"` // the client's, as given
	// ScheduledTransferID and Occurrence name the schedule and the number of the occurrence a
	// transfer is (docs/contract.md §9); empty for any other.
	ScheduledTransferID string `json:",omitempty"`
	Occurrence          int    `json:",omitempty"`
	// RefundRemaining is a refund of all that remains of its transfer when it posts: its
	// AmountMinor, what remained when it was claimed, stands until then (docs/contract.md §8).
	// The claimed row holds it, not a run's input.
	RefundRemaining bool `json:"-"`
}

// Kinds of posting.
const (
	KindTransfer = "transfer"
	KindPayout   = "payout"
	KindReturn   = "return"
	KindPayin    = "payin"
	KindRefund   = "refund"
	KindCapture  = "capture" // an authorization's captured money: it consumes the authorization's hold
)

// Why a transfer or refund was rejected: its failure_reason, which its answer names.
const (
	ReasonRefundExceeds = "the refund exceeds what remains of the transfer"
	ReasonNotRefundable = "only a completed transfer can be refunded"
)

func (p Posting) kind() string {
	if p.Kind == "" {
		return KindTransfer
	}
	return p.Kind
}

// answered is true for the postings a client asked for under a key of its own, whose answer is
// stored with them: transfers and refunds.
func (p Posting) answered() bool { return p.kind() == KindTransfer || p.kind() == KindRefund }

// ErrInvalidPosting is a posting that can never succeed, whatever is retried: the accounts do
// not exist or do not hold its currency. The API checks all of this before starting; reaching
// it here means the accounts changed or a caller skipped the checks.
var ErrInvalidPosting = errors.New("invalid posting")

// ErrFenced is a posting by a workflow run that has already given up on the transfer (MarkFailed
// names it): its client was told that no money moved, so this run must not move it now. A new
// run of the same workflow ID may.
var ErrFenced = errors.New("the transfer was marked failed by this run")

// Answer is the answer to a transfer in a final state, in the shape of the edge that received
// the request (the HTTP API's, api.TransferAnswer): the ledger stores it in the posting's
// transaction, and it is replayed byte for byte.
type Answer func(Transfer) idempotency.Response

// Post posts p exactly once and stores its final answer, made by answer, in one transaction.
// Called again with the same transfer id (an activity retried after its commit, a re-run, a UI
// Reset), it posts nothing and returns the outcome and answer of the first call. A transfer
// without enough funds is rejected: a final outcome, stored and replayed like a completed one.
func (l *Ledger) Post(ctx context.Context, p Posting, answer Answer) (t Transfer, resp idempotency.Response, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		t, resp, err = post(ctx, tx, o, p, answer)
		return err
	})
	return t, resp, err
}

func post(ctx context.Context, tx pgx.Tx, o *outbox, p Posting, answer Answer) (Transfer, idempotency.Response, error) {
	// Lock the accounts before a new row names them. Its foreign keys take KEY SHARE on both
	// accounts; taken while another posting holds an account's lock (and kept while waiting for
	// it), each share makes the account's row a multixact of every transaction queued on it,
	// which every later reader of the row resolves: a hot account then slows down as the ledger
	// grows. Taken after this lock, the shares are this transaction's own.
	accounts, err := lockAccounts(ctx, tx, p.From, p.To)
	if err != nil {
		return Transfer{}, idempotency.Response{}, err
	}
	// Claim the transfer id. DO UPDATE (rather than DO NOTHING) returns the row either way
	// and locks it, so a concurrent posting of the same id waits here and then sees it final,
	// and MarkFailed waits for a posting under way.
	var fenced, remaining bool
	t, err := scanTransfer(tx.QueryRow(ctx, `
		INSERT INTO transfers (id, status, from_account_id, to_account_id, amount_minor, currency, description, workflow_id,
			kind, refund_of, metadata, refund_remaining, scheduled_transfer_id, occurrence)
		VALUES ($1, 'pending', $2, $3, $4, $5, $6, $7, $9, NULLIF($10, ''), $11, $12, NULLIF($13, ''), NULLIF($14, 0))
		ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id
		RETURNING `+transferColumns+`, $8::text = ANY(failed_runs), refund_remaining`,
		p.TransferID, p.From, p.To, p.AmountMinor, p.Currency, p.Description, p.WorkflowID, p.RunID, p.kind(),
		p.RefundOf, p.Metadata.stored(), p.RefundRemaining, p.ScheduledTransferID, p.Occurrence), &fenced, &remaining)
	if err != nil {
		return t, idempotency.Response{}, fkInvalid(err)
	}
	if t.Status.Final() { // posted before: nothing more to do
		if !p.answered() {
			return t, idempotency.Response{}, nil
		}
		resp, err := StoredAnswer(ctx, tx, p.Scope, t, answer)
		return t, resp, err
	}
	if fenced {
		return t, idempotency.Response{}, ErrFenced
	}
	// The row, claimed with the request, says what the posting is; a posting that says otherwise
	// (a worker that does not know refunds, given a refund's claim) must not move its money.
	if t.Kind != p.kind() { // (refund_has_transfer: a refund's row always names its transfer)
		return t, idempotency.Response{}, fmt.Errorf("%w: %s %s posted as a %s", ErrInvalidPosting, t.Kind, t.ID, p.kind())
	}

	// A refund locks its transfer first (every refund of it takes the same lock, then the
	// accounts), so that refunds racing for its last units are decided one after the other.
	// The row, not p, says whether it takes all that remains: a re-run or a recovery's input
	// holds only an amount.
	reason := ""
	if p.kind() == KindRefund {
		if t, reason, err = refundable(ctx, tx, t, remaining); err != nil {
			return t, idempotency.Response{}, err
		}
	}
	if reason == "" {
		reason, err = moveMoney(ctx, tx, p, t, accounts)
	}
	if err == nil && reason != "" {
		t, err = finish(ctx, tx, t.ID, TransferRejected, reason)
	} else if err == nil {
		t, err = finish(ctx, tx, t.ID, TransferCompleted, "")
	}
	if err != nil || !p.answered() {
		return t, idempotency.Response{}, err
	}
	o.posting(t)
	resp := answer(t)
	return t, resp, idempotency.Complete(ctx, tx, p.Scope, resp, time.Duration(p.ReplayFor))
}

// moveMoney moves t's money (posted under p) and returns "", or returns why it cannot:
// ReasonInsufficientFunds, when its source is a customer's without the amount available.
func moveMoney(ctx context.Context, tx pgx.Tx, p Posting, t Transfer, accounts map[string]Account) (reason string, err error) {
	from, okFrom := accounts[t.FromAccountID]
	to, okTo := accounts[t.ToAccountID]
	if !okFrom || !okTo { // the row, claimed with the request, is between other accounts
		return "", fmt.Errorf("%w: %s %s claimed between %s and %s, posted between %s and %s", ErrInvalidPosting,
			t.Kind, t.ID, t.FromAccountID, t.ToAccountID, p.From, p.To)
	}
	if from.Currency != t.Currency || to.Currency != t.Currency {
		return "", fmt.Errorf("%w: transfer in %s between accounts in %s and %s",
			ErrInvalidPosting, t.Currency, from.Currency, to.Currency)
	}

	fromAfter, toAfter := from.BalanceMinor-t.AmountMinor, to.BalanceMinor+t.AmountMinor
	if fromAfter > from.BalanceMinor || toAfter < to.BalanceMinor {
		return "", fmt.Errorf("%w: a balance would overflow 64 bits", ErrInvalidPosting)
	}
	// A payout's or a capture's money is held already: its posting takes the hold (all of it,
	// when a capture takes part) instead of available funds.
	released := int64(0)
	if p.kind() == KindPayout || p.kind() == KindCapture {
		if released, err = consumeHold(ctx, tx, t.ID, from.ID, t.AmountMinor); err != nil {
			return "", err
		}
	}
	if p.kind() == KindRefund && (from.Kind != KindCustomer || to.Kind != KindCustomer) {
		return "", fmt.Errorf("%w: refund %s between a %s and a %s account", ErrInvalidPosting, t.ID, from.Kind, to.Kind)
	}
	if from.Kind == KindCustomer && released == 0 && from.AvailableMinor < t.AmountMinor {
		return ReasonInsufficientFunds, nil
	}
	if err := move(ctx, tx, t, fromAfter, toAfter, released); err != nil {
		return "", err
	}
	if p.kind() == KindRefund {
		_, err = tx.Exec(ctx, `UPDATE transfers SET amount_refunded_minor = amount_refunded_minor + $2 WHERE id = $1`,
			*t.RefundOf, t.AmountMinor)
	}
	return "", err
}

// refundable locks the transfer refund r gives money back from and returns r, and "" if r may
// take its amount from it, or why not: the transfer is not completed (ReasonNotRefundable), or
// less than r's amount remains of it (ReasonRefundExceeds). A refund of all that remains
// (remaining) takes, under that lock, what the refunds before it left, and is returned with
// that amount; nothing left is ReasonRefundExceeds, as for a refund that asked for more than
// there is. A refund that does not reverse its transfer's accounts and currency is a bug no
// retry can fix.
func refundable(ctx context.Context, tx pgx.Tx, r Transfer, remaining bool) (Transfer, string, error) {
	if r.RefundOf == nil {
		return r, "", fmt.Errorf("%w: refund %s names no transfer", ErrInvalidPosting, r.ID)
	}
	// FOR NO KEY UPDATE, as for accounts: refunds of the transfer take turns, while claiming a new
	// refund (whose foreign key to the transfer takes KEY SHARE) does not wait for them.
	t, err := scanTransfer(tx.QueryRow(ctx, `SELECT `+transferColumns+` FROM transfers WHERE id = $1 FOR NO KEY UPDATE`, *r.RefundOf))
	left := t.AmountMinor - t.AmountRefundedMinor
	switch {
	case errors.Is(err, ErrNotFound):
		return r, "", fmt.Errorf("%w: refund %s of transfer %s, which does not exist", ErrInvalidPosting, r.ID, *r.RefundOf)
	case err != nil:
		return r, "", err
	case t.Kind != KindTransfer || t.FromAccountID != r.ToAccountID || t.ToAccountID != r.FromAccountID || t.Currency != r.Currency:
		return r, "", fmt.Errorf("%w: refund %s does not reverse transfer %s", ErrInvalidPosting, r.ID, t.ID)
	case t.Status != TransferCompleted:
		return r, ReasonNotRefundable, nil
	case left <= 0 || (!remaining && left < r.AmountMinor):
		return r, ReasonRefundExceeds, nil
	case remaining && left != r.AmountMinor:
		r.AmountMinor = left
		_, err = tx.Exec(ctx, `UPDATE transfers SET amount_minor = $2 WHERE id = $1`, r.ID, left)
	}
	return r, "", err
}

// consumeHold marks hold id (a payout's or an authorization's), open on account for at least
// amount, posted, and returns the amount it held. A posting without its open hold is a bug no
// retry can fix.
func consumeHold(ctx context.Context, tx pgx.Tx, id, account string, amount int64) (int64, error) {
	var held int64
	err := tx.QueryRow(ctx, `UPDATE holds SET status = 'posted', ended_at = now()
		WHERE id = $1 AND account_id = $2 AND amount_minor >= $3 AND status = 'open' RETURNING amount_minor`,
		id, account, amount).Scan(&held)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: %s has no open hold of %d on %s", ErrInvalidPosting, id, amount, account)
	}
	return held, err
}

// lockAccounts locks both accounts in id order, the one global order every posting uses, so two
// transfers in opposite directions cannot deadlock. FOR NO KEY UPDATE (what the balance update
// needs, as it changes no key) leaves the KEY SHARE locks of foreign-key checks free: claiming a
// new transfer, which inserts a row referencing both accounts, never waits for a posting.
func lockAccounts(ctx context.Context, tx pgx.Tx, ids ...string) (map[string]Account, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids))) // one account named twice is the row's check to refuse
	rows, err := tx.Query(ctx, `SELECT `+accountColumns+` FROM accounts WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]Account, 2)
	for rows.Next() {
		acc, err := scanAccount(rows)
		if err != nil {
			return nil, err
		}
		out[acc.ID] = acc
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(ids) {
		return nil, fmt.Errorf("%w: account not found", ErrInvalidPosting)
	}
	return out, nil
}

// move writes both balances and both entries, and takes released off the source's held amount
// (a payout's hold, now posted); the balances were read under lock.
func move(ctx context.Context, tx pgx.Tx, t Transfer, fromAfter, toAfter, released int64) error {
	_, err := tx.Exec(ctx, `
		WITH upd AS (
			UPDATE accounts SET balance_minor = CASE id WHEN $2 THEN $4::bigint ELSE $5::bigint END,
				held_minor = held_minor - CASE id WHEN $2 THEN $7::bigint ELSE 0 END
			WHERE id IN ($2, $3)
		)
		INSERT INTO entries (transfer_id, account_id, amount_minor, balance_after_minor)
		VALUES ($1, $2, -$6::bigint, $4), ($1, $3, $6, $5)`,
		t.ID, t.FromAccountID, t.ToAccountID, fromAfter, toAfter, t.AmountMinor, released)
	return err
}

func finish(ctx context.Context, q database.Querier, id string, status TransferStatus, reason string) (Transfer, error) {
	return scanTransfer(q.QueryRow(ctx, `
		UPDATE transfers SET status = $2, completed_at = now(), failure_reason = NULLIF($3, '')
		WHERE id = $1
		RETURNING `+transferColumns, id, status, reason))
}

// MarkFailed records that run, a run of the transfer's workflow, gave up on it, for reason (a
// sentence a client may read), and returns the transfer as the ledger now holds it. It changes
// only a transfer not final: one that completed or was rejected keeps that outcome (a posting
// can commit and still be reported lost to the workflow; a posting still under way holds the
// row's lock, and this waits for it), and one never inserted is left alone (ErrNotFound). From
// then on, a posting by run is refused (ErrFenced), so a failed transfer stays one that moved no
// money; a new run of the same workflow ID can still post it.
func (l *Ledger) MarkFailed(ctx context.Context, id, run, reason string) (t Transfer, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		var was TransferStatus
		t, err = scanTransfer(tx.QueryRow(ctx, `
			UPDATE transfers t SET status = 'failed', completed_at = now(),
				failure_reason = CASE WHEN $2::text = ANY(t.failed_runs) THEN t.failure_reason ELSE $3 END,
				failed_runs = CASE WHEN $2::text = '' OR $2::text = ANY(t.failed_runs) THEN t.failed_runs
					ELSE array_append(t.failed_runs, $2::text) END
			FROM (SELECT id, status FROM transfers WHERE id = $1 FOR UPDATE) was
			WHERE t.id = was.id AND t.status IN ('pending', 'failed')
			RETURNING `+qualified("t", transferColumns)+`, was.status`, id, run, reason), &was)
		if errors.Is(err, ErrNotFound) { // final already, or never inserted
			t, err = scanTransfer(tx.QueryRow(ctx, `SELECT `+transferColumns+` FROM transfers WHERE id = $1 AND kind IN ('transfer', 'refund')`, id))
			return err
		}
		if err == nil && was == TransferPending {
			o.posting(t)
		}
		return err
	})
	return t, err
}

// StoredAnswer returns the answer stored when t (final) was posted, byte for byte, or makes it
// again with answer when its record has expired and been deleted.
func StoredAnswer(ctx context.Context, q database.Querier, s idempotency.Scope, t Transfer, answer Answer) (idempotency.Response, error) {
	return storedAnswer(ctx, q, s, t.ID, func() idempotency.Response { return answer(t) })
}

// storedAnswer returns the answer stored under scope s for resource id, or answer() when there
// is none (its record expired and was deleted).
func storedAnswer(ctx context.Context, q database.Querier, s idempotency.Scope, id string, answer func() idempotency.Response) (idempotency.Response, error) {
	rec, found, err := idempotency.Lookup(ctx, q, s)
	if err != nil {
		return idempotency.Response{}, err
	}
	if found && rec.Response != nil && rec.ResourceID == id {
		return *rec.Response, nil
	}
	return answer(), nil
}

// fkInvalid reports a foreign-key or check violation on the transfer row (unknown account, same
// account twice, non-positive amount) as an invalid posting, which no retry can fix.
func fkInvalid(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23503" || pgErr.Code == "23514") {
		return fmt.Errorf("%w: %s", ErrInvalidPosting, pgErr.Message)
	}
	return err
}

// InsertPending records the transfer as pending before its workflow starts, so it can be read
// at once. Posting it later finds the row and completes it.
func InsertPending(ctx context.Context, q database.Querier, p Posting) error {
	_, err := q.Exec(ctx, `
		INSERT INTO transfers (id, status, from_account_id, to_account_id, amount_minor, currency, description, workflow_id,
			kind, refund_of, metadata, refund_remaining, scheduled_transfer_id, occurrence)
		VALUES ($1, 'pending', $2, $3, $4, $5, $6, $7, $8, NULLIF($9, ''), $10, $11, NULLIF($12, ''), NULLIF($13, 0))
		ON CONFLICT (id) DO NOTHING`,
		p.TransferID, p.From, p.To, p.AmountMinor, p.Currency, p.Description, p.WorkflowID, p.kind(), p.RefundOf,
		p.Metadata.stored(), p.RefundRemaining, p.ScheduledTransferID, p.Occurrence)
	return err
}

// ClaimedAmount is the amount of the transfer or refund claimed as id, or otherwise when it is
// not in the ledger (its claim was withdrawn).
func ClaimedAmount(ctx context.Context, q database.Querier, id string, otherwise int64) (int64, error) {
	amount := otherwise
	err := q.QueryRow(ctx, `SELECT amount_minor FROM transfers WHERE id = $1`, id).Scan(&amount)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return amount, err
}

// TransfersUnder counts the transfers made under workflow ID id: one per use of its key.
func TransfersUnder(ctx context.Context, q database.Querier, id string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM transfers WHERE workflow_id = $1`, id).Scan(&n)
	return n, err
}

// StalePending calls f for every transfer pending for longer than olderThan, oldest first, a
// page at a time: those the recovery pass looks at.
func (l *Ledger) StalePending(ctx context.Context, olderThan time.Duration, f func([]Transfer) error) error {
	return olderPages(ctx, l.DB, `SELECT `+transferColumns+` FROM transfers WHERE status = 'pending'`, olderThan,
		func(row pgx.CollectableRow) (Transfer, error) { return scanTransfer(row) },
		func(t Transfer) (time.Time, string) { return t.CreatedAt, t.ID }, f)
}

// olderPages calls f, a page at a time, oldest first, with the rows of query (a SELECT … WHERE
// over a table with created_at and id) created more than olderThan ago; key is a row's
// (created_at, id), where the next page starts after.
func olderPages[T any](ctx context.Context, db database.Querier, query string, olderThan time.Duration,
	scan pgx.RowToFunc[T], key func(T) (time.Time, string), f func([]T) error) error {
	after, afterID := time.Time{}, ""
	for {
		rows, err := db.Query(ctx, query+` AND created_at < now() - $1::interval AND (created_at, id) > ($2, $3)
			ORDER BY created_at, id LIMIT 500`, olderThan, after, afterID)
		if err != nil {
			return err
		}
		page, err := pgx.CollectRows(rows, scan)
		if err != nil || len(page) == 0 {
			return err
		}
		if err := f(page); err != nil {
			return err
		}
		after, afterID = key(page[len(page)-1])
	}
}
