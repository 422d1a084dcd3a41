package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
)

// Verdict is what is decided about a payout waiting for approval (docs/contract.md §9).
type Verdict string

const (
	VerdictApprove Verdict = "approve" // a second key approves it: on to the bank
	VerdictReject  Verdict = "reject"  // a second key rejects it: failed, the hold released
	VerdictTimeout Verdict = "timeout" // nobody decided by its approval_due_at: failed, released
	VerdictCancel  Verdict = "cancel"  // an operator cancelled its run: failed, released
)

// ErrPayoutNotHeld is a decision on a payout that needs approval whose money is not held yet:
// its run has not held it (starting, or not started yet). Nothing is decided or stored; ask again.
var ErrPayoutNotHeld = errors.New("the payout's money is not held yet")

// Approval is one decision about payout PayoutID, and the idempotency scope its answer is stored
// under (none for a timeout or a cancel, which nobody waits on). A payout workflow's Updates and
// activities carry it, the scope's fields as its own, as histories hold them.
type Approval struct {
	PayoutID string
	Verdict  Verdict
	KeyID    string `json:",omitempty"` // the deciding key's id (approve, reject)
	Reason   string `json:",omitempty"` // the rejecter's, or why it timed out or was cancelled
	idempotency.Scope
	ReplayFor config.Duration // how long the stored answer is replayed
}

// ApprovalAnswer is the answer to a decision about a payout, in the shape of the edge that
// received it (api.ApprovalAnswer): stored in the transaction that decides it, replayed byte for
// byte. won is false for a decision that came after another, or after the payout stopped waiting.
type ApprovalAnswer func(po Payout, v Verdict, won bool) idempotency.Response

// Decide decides payout d.PayoutID as d says, if it is still waiting for approval: approved, it
// is processing (its run gives the bank the instruction); rejected, timed out or cancelled, it
// fails and its hold is released. Whichever decision comes first under the payout's row lock
// wins; the others find it decided and lose. A decision at or after its approval_due_at, when
// its run has not timed it out yet (no worker, PostgreSQL away), times it out and loses. The
// answer is stored under d's scope with it.
//
// A decision about a payout that needs approval but whose money is not held yet is ErrPayoutNotHeld,
// and nothing is stored: the same request is to be sent again.
func (l *Ledger) DecideApproval(ctx context.Context, d Approval, answer ApprovalAnswer) (po Payout, resp idempotency.Response, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if po, err = lockPayout(ctx, tx, d.PayoutID); err != nil {
			return err
		}
		resp, err = decided(ctx, tx, d.Scope, po.ID, d.ReplayFor, func() (idempotency.Response, error) {
			before := po.Status
			won, err := judge(ctx, tx, &po, d)
			if err != nil {
				return idempotency.Response{}, err
			}
			if po.Status != before {
				o.payout(po)
			}
			return answer(po, d.Verdict, won), nil
		})
		return err
	})
	return po, resp, err
}

// judge applies d to po, locked, and reports whether d won.
func judge(ctx context.Context, tx pgx.Tx, po *Payout, d Approval) (bool, error) {
	if po.Status == PayoutProcessing && po.NeedsApproval() && po.ApprovedBy == nil {
		return false, ErrPayoutNotHeld
	}
	if po.Status != PayoutPendingApproval {
		return false, nil
	}
	verdict, reason := d.Verdict, d.Reason
	var due bool
	if err := tx.QueryRow(ctx, `SELECT now() >= $1`, po.ApprovalDueAt).Scan(&due); err != nil {
		return false, err
	}
	if due && verdict != VerdictTimeout {
		verdict, reason = VerdictTimeout, NotApprovedReason(*po.ApprovalDueAt)
	}
	var err error
	switch verdict {
	case VerdictApprove:
		*po, err = scanPayout(tx.QueryRow(ctx, `UPDATE payouts SET status = 'processing', approved_by = $2 WHERE id = $1
			RETURNING `+payoutColumns, po.ID, d.KeyID))
	case VerdictReject, VerdictTimeout, VerdictCancel:
		rejecter := ""
		if verdict == VerdictReject {
			rejecter, reason = d.KeyID, RejectedReason(d.KeyID, d.Reason)
		}
		if err = releaseHold(ctx, tx, po.ID); err == nil {
			*po, err = scanPayout(tx.QueryRow(ctx, `
				UPDATE payouts SET status = 'failed', failed_at = now(), failure_reason = $2, rejected_by = NULLIF($3, '')
				WHERE id = $1 RETURNING `+payoutColumns, po.ID, reason, rejecter))
		}
	default:
		return false, fmt.Errorf("%w: no such verdict %q", ErrInvalidPosting, d.Verdict)
	}
	return err == nil && verdict == d.Verdict, err
}

// RejectedReason is the failure_reason of a payout key rejected, with the rejecter's reason.
func RejectedReason(key, reason string) string {
	if reason == "" {
		return "rejected by " + key
	}
	return "rejected by " + key + ": " + reason
}

// NotApprovedReason is the failure_reason of a payout nobody decided by due.
func NotApprovedReason(due time.Time) string {
	return "not approved by " + due.UTC().Format(time.RFC3339)
}

// PendingApprovals returns the payouts waiting for approval, oldest first, at most limit.
func (l *Ledger) PendingApprovals(ctx context.Context, limit int) ([]Payout, error) {
	rows, _ := l.DB.Query(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE status = 'pending_approval'
		ORDER BY created_at, id LIMIT $1`, limit)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Payout, error) { return scanPayout(row) })
}

// decided returns the answer stored under s about resource id if there is one; otherwise it runs
// apply and stores its answer under s, in tx, for replayFor. The answer is stored only under a
// claim of this resource still waiting for it: a record that expired and was deleted, or that a
// later use of the key took, keeps what it holds (a re-run or a Reset of an old run must not
// answer for another operation). A scope without a key (a timer's decision) stores nothing.
func decided(ctx context.Context, tx pgx.Tx, s idempotency.Scope, id string, replayFor config.Duration,
	apply func() (idempotency.Response, error)) (idempotency.Response, error) {
	store := false
	if s.Key != "" {
		rec, found, err := idempotency.Lookup(ctx, tx, s)
		if err != nil {
			return idempotency.Response{}, err
		}
		if found && rec.Response != nil && rec.ResourceID == id {
			return *rec.Response, nil
		}
		store = found && rec.ResourceID == id
	}
	resp, err := apply()
	if err != nil || !store {
		return resp, err
	}
	return resp, idempotency.Complete(ctx, tx, s, resp, time.Duration(replayFor))
}
