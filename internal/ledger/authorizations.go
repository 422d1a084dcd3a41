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

// Authorization is an authorization as the API shows it (docs/contract.md §9): money held on its
// source until the payee captures it (all or part), voids it, or it expires.
type Authorization struct {
	ID                  string              `json:"id"`
	Status              AuthorizationStatus `json:"status"`
	FromAccountID       string              `json:"from_account_id"`
	ToAccountID         string              `json:"to_account_id"`
	AmountMinor         int64               `json:"amount_minor"`
	AmountCapturedMinor int64               `json:"amount_captured_minor"`
	Currency            string              `json:"currency"`
	ExpiresAt           time.Time           `json:"expires_at"`
	WorkflowID          string              `json:"workflow_id"`
	CreatedAt           time.Time           `json:"created_at"`
	CapturedAt          *time.Time          `json:"captured_at"`
	VoidedAt            *time.Time          `json:"voided_at"`
	ExpiredAt           *time.Time          `json:"expired_at"`
	Description         string              `json:"description"`
	Metadata            Metadata            `json:"metadata"`
}

// AuthorizationAnswer is the answer to an authorization or to a decision on it, in the shape of
// the edge that received it (api.AuthorizationAnswer): stored in the transaction that decides
// it, replayed byte for byte. won is false for a decision that came too late.
type AuthorizationAnswer func(a Authorization, d Action, won bool) idempotency.Response

// ErrNotHeld is a capture or void of an authorization whose money is not held yet: its run has
// not held it (starting, or not started yet). Nothing is decided or stored; ask again.
var ErrNotHeld = errors.New("the authorization's money is not held yet")

// Action is what is done to an authorization: held (Authorize), or ended by a decision.
type Action string

const (
	ActionAuthorize Action = "authorize"
	ActionCapture   Action = "capture"
	ActionVoid      Action = "void"
	ActionExpire    Action = "expire"
)

const authorizationColumns = `id, status, from_account_id, to_account_id, amount_minor, amount_captured_minor, currency,
	expires_at, workflow_id, created_at, captured_at, voided_at, expired_at, description, metadata`

func scanAuthorization(row pgx.Row) (Authorization, error) {
	var a Authorization
	err := row.Scan(&a.ID, &a.Status, &a.FromAccountID, &a.ToAccountID, &a.AmountMinor, &a.AmountCapturedMinor,
		&a.Currency, &a.ExpiresAt, &a.WorkflowID, &a.CreatedAt, &a.CapturedAt, &a.VoidedAt, &a.ExpiredAt,
		&a.Description, &a.Metadata)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, ErrNotFound
	}
	a.CreatedAt, a.ExpiresAt = UTC(a.CreatedAt), UTC(a.ExpiresAt)
	utcAll(&a.CapturedAt, &a.VoidedAt, &a.ExpiredAt)
	return a, err
}

// InsertAuthorization records an authorization, pending, when its request is claimed and before
// its workflow starts, so that it can be read at once. Nothing is held yet: Authorize holds it.
func InsertAuthorization(ctx context.Context, q database.Querier, a Authorization) error {
	_, err := q.Exec(ctx, `
		INSERT INTO authorizations (id, status, from_account_id, to_account_id, amount_minor, currency, expires_at,
			workflow_id, description, metadata)
		VALUES ($1, 'pending', $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (id) DO NOTHING`,
		a.ID, a.FromAccountID, a.ToAccountID, a.AmountMinor, a.Currency, a.ExpiresAt, a.WorkflowID, a.Description,
		a.Metadata.stored())
	return err
}

// Authorization returns authorization id if ownerID holds either of its accounts (any owner
// when empty).
func (l *Ledger) Authorization(ctx context.Context, ownerID, id string) (Authorization, error) {
	return scanAuthorization(l.DB.QueryRow(ctx, `
		SELECT `+authorizationColumns+` FROM authorizations t
		WHERE id = $1 AND ($2 = '' OR EXISTS (SELECT 1 FROM accounts a
			WHERE a.id IN (t.from_account_id, t.to_account_id) AND a.owner_id = $2))`, id, ownerID))
}

// AuthorizationsUnder counts the authorizations made under workflow ID id: one per use of its key.
func AuthorizationsUnder(ctx context.Context, q database.Querier, id string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM authorizations WHERE workflow_id = $1`, id).Scan(&n)
	return n, err
}

func lockAuthorization(ctx context.Context, tx pgx.Tx, id string) (Authorization, error) {
	return scanAuthorization(tx.QueryRow(ctx, `SELECT `+authorizationColumns+` FROM authorizations WHERE id = $1 FOR UPDATE`, id))
}

// Decision is one thing done to authorization ID, and the idempotency scope its answer is stored
// under: the authorization's own for ActionAuthorize, the capture's or void's request for those,
// none for an expiry (its timer's, which nobody waits on). An authorization workflow's input and
// its Updates' arguments hold it, the scope's fields as its own, as histories hold them.
type Decision struct {
	AuthorizationID string
	Action          Action
	// AmountMinor is what a capture takes; 0 takes all that was authorized.
	AmountMinor int64 `json:",omitempty"`
	idempotency.Scope
	ReplayFor config.Duration // how long the stored answer is replayed
}

// Authorize holds the money of authorization d.AuthorizationID, once however often it is
// called: if its source has the amount available, a hold of it; otherwise the authorization is
// rejected. Its first answer is stored under d's scope in the same transaction.
func (l *Ledger) Authorize(ctx context.Context, d Decision, answer AuthorizationAnswer) (Authorization, idempotency.Response, error) {
	return l.decide(ctx, d, answer, func(tx pgx.Tx, a Authorization) (Authorization, bool, error) {
		if a.Status != AuthorizationPending { // held (or refused) before
			return a, a.Status != AuthorizationRejected, nil
		}
		accounts, err := lockAccounts(ctx, tx, a.FromAccountID, a.ToAccountID)
		if err != nil {
			return a, false, err
		}
		from, to := accounts[a.FromAccountID], accounts[a.ToAccountID]
		if from.Kind != KindCustomer || to.Kind != KindCustomer || from.Currency != a.Currency || to.Currency != a.Currency {
			return a, false, fmt.Errorf("%w: authorization in %s between a %s account in %s and a %s account in %s",
				ErrInvalidPosting, a.Currency, from.Kind, from.Currency, to.Kind, to.Currency)
		}
		if from.AvailableMinor < a.AmountMinor {
			a, err = endAuthorization(ctx, tx, a.ID, AuthorizationRejected, "", 0)
			return a, false, err
		}
		if err := placeHold(ctx, tx, "authorization_id", a.ID, a.FromAccountID, a.AmountMinor); err != nil {
			return a, false, err
		}
		a, err = endAuthorization(ctx, tx, a.ID, AuthorizationAuthorized, "", 0)
		return a, true, err
	})
}

// Decide ends authorization d.AuthorizationID as d says, if it is still authorized: a capture
// posts what it takes from the source to the destination (entries under the authorization's id)
// and releases the rest; a void or an expiry releases it all. Whichever of those comes first
// under the authorization's lock wins; the others find it ended and lose (won false). A
// decision's answer is stored under its scope with it, so the same decision asked again (a
// retried activity, an Update re-sent, a request replayed) returns what it was answered first.
//
// A capture or void of one whose money is not held yet (pending) is ErrNotHeld, and nothing is
// stored: it is not an answer, the same request is to be sent again. One that comes at or after
// expires_at, when the run's expiry has not ended it yet (no worker, PostgreSQL away), expires
// it and loses: the hold is released at expires_at, whoever asks first.
func (l *Ledger) Decide(ctx context.Context, d Decision, answer AuthorizationAnswer) (Authorization, idempotency.Response, error) {
	return l.decide(ctx, d, answer, func(tx pgx.Tx, a Authorization) (Authorization, bool, error) {
		if a.Status == AuthorizationPending && d.Action != ActionExpire {
			return a, false, ErrNotHeld
		}
		if a.Status != AuthorizationAuthorized {
			return a, false, nil
		}
		var due bool
		if err := tx.QueryRow(ctx, `SELECT now() >= $1`, a.ExpiresAt).Scan(&due); err != nil {
			return a, false, err
		}
		action := d.Action
		if due {
			action = ActionExpire
		}
		var err error
		switch action {
		case ActionCapture:
			amount := d.AmountMinor
			if amount == 0 {
				amount = a.AmountMinor
			}
			if amount > a.AmountMinor {
				return a, false, fmt.Errorf("%w: a capture of %d from authorization %s of %d", ErrInvalidPosting, amount, a.ID, a.AmountMinor)
			}
			if _, _, err = post(ctx, tx, &outbox{}, Posting{TransferID: a.ID, WorkflowID: a.WorkflowID, From: a.FromAccountID,
				To: a.ToAccountID, AmountMinor: amount, Currency: a.Currency, Description: "capture of " + a.ID,
				Kind: KindCapture}, nil); err != nil {
				return a, false, err
			}
			a, err = endAuthorization(ctx, tx, a.ID, AuthorizationCaptured, "captured_at", amount)
		case ActionVoid, ActionExpire:
			if err = releaseHold(ctx, tx, a.ID); err != nil {
				return a, false, err
			}
			status, at := AuthorizationVoided, "voided_at"
			if action == ActionExpire {
				status, at = AuthorizationExpired, "expired_at"
			}
			a, err = endAuthorization(ctx, tx, a.ID, status, at, 0)
		default:
			return a, false, fmt.Errorf("%w: no such decision %q", ErrInvalidPosting, d.Action)
		}
		return a, err == nil && action == d.Action, err
	})
}

// decide runs apply on d's authorization, locked, unless d's answer is stored already, and
// stores the answer of what apply did (won: it changed the authorization as d asked) under d's
// scope, with the event of the change (decided).
func (l *Ledger) decide(ctx context.Context, d Decision, answer AuthorizationAnswer,
	apply func(pgx.Tx, Authorization) (Authorization, bool, error)) (a Authorization, resp idempotency.Response, err error) {
	err = l.change(ctx, func(tx pgx.Tx, o *outbox) error {
		if a, err = lockAuthorization(ctx, tx, d.AuthorizationID); err != nil {
			return err
		}
		resp, err = decided(ctx, tx, d.Scope, a.ID, d.ReplayFor, func() (idempotency.Response, error) {
			before := a.Status
			var won bool
			if a, won, err = apply(tx, a); err != nil {
				return idempotency.Response{}, err
			}
			if a.Status != before && a.Status != AuthorizationRejected {
				o.authorization(a)
			}
			return answer(a, d.Action, won), nil
		})
		return err
	})
	return a, resp, err
}

// endAuthorization sets authorization id's status, the time column of it (none when empty) and
// the amount captured.
func endAuthorization(ctx context.Context, tx pgx.Tx, id string, status AuthorizationStatus, at string, captured int64) (Authorization, error) {
	set := ""
	if at != "" {
		set = ", " + at + " = now()"
	}
	return scanAuthorization(tx.QueryRow(ctx, `
		UPDATE authorizations SET status = $2, amount_captured_minor = $3`+set+`
		WHERE id = $1 RETURNING `+authorizationColumns, id, status, captured))
}

// OpenAuthorizations calls f for every authorization still pending or authorized that was
// claimed more than olderThan ago, oldest first, a page at a time: those whose run the recovery
// pass looks at.
func (l *Ledger) OpenAuthorizations(ctx context.Context, olderThan time.Duration, f func([]Authorization) error) error {
	return olderPages(ctx, l.DB, `SELECT `+authorizationColumns+` FROM authorizations WHERE status IN ('pending', 'authorized')`,
		olderThan, func(row pgx.CollectableRow) (Authorization, error) { return scanAuthorization(row) },
		func(a Authorization) (time.Time, string) { return a.CreatedAt, a.ID }, f)
}

// ClaimedAuthorization is authorization id as claimed (ErrNotFound when its claim was withdrawn).
func ClaimedAuthorization(ctx context.Context, q database.Querier, id string) (Authorization, error) {
	return scanAuthorization(q.QueryRow(ctx, `SELECT `+authorizationColumns+` FROM authorizations WHERE id = $1`, id))
}
