package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/internal/webhook"
)

// Endpoint is a client's webhook receiver as the API shows it. Its secret is shown once, in the
// answer that created it (Secret is then set); Endpoint never reads it back.
type Endpoint struct {
	ID         string    `json:"id"`
	URL        string    `json:"url"`
	EventTypes []string  `json:"event_types"`
	Secret     string    `json:"secret,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// CreateEndpoint records endpoint e of ownerID, its secret sealed, in tx, under the owner's feed
// lock: the endpoint receives exactly the owner's events that commit after it.
func CreateEndpoint(ctx context.Context, tx database.Querier, keys *keyring.Ring, ownerID string, e Endpoint) (Endpoint, error) {
	if keys == nil {
		return e, ErrNoKeys
	}
	if err := lockOwner(ctx, tx, ownerID); err != nil {
		return e, err
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1 AND deleted_at IS NULL`,
		ownerID).Scan(&n); err != nil {
		return e, err
	}
	if n >= MaxEndpoints {
		return e, ErrTooManyEndpoints
	}
	keyID, sealed := keys.Seal([]byte(e.Secret), secretAAD(e.ID))
	err := tx.QueryRow(ctx, `INSERT INTO webhook_endpoints (id, owner_id, url, event_types, secret_key, secret_sealed)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING created_at`, e.ID, ownerID, e.URL, e.EventTypes, keyID, sealed).Scan(&e.CreatedAt)
	e.CreatedAt = UTC(e.CreatedAt)
	return e, err
}

// ErrNoKeys refuses to store a secret without the keys that seal it (PAYMENTS_CODEC_KEYS).
var ErrNoKeys = errors.New("no keys to seal secrets with: PAYMENTS_CODEC_KEYS is not set")

// secretAAD binds a sealed secret to its endpoint: it opens as that endpoint's secret only.
func secretAAD(endpointID string) []byte { return []byte("webhook-secret/" + endpointID) }

// answerAAD binds a sealed stored answer to its idempotency scope.
func answerAAD(s idempotency.Scope) []byte {
	return []byte("answer/" + s.OwnerID + "/" + s.Route + "/" + s.Key)
}

// MaxEndpoints is how many webhook endpoints an owner may have at once: every event of the
// owner's writes a delivery row per endpoint in the transaction of its change, so the limit
// bounds what one owner adds to each of its postings (docs/contract.md §7).
const MaxEndpoints = 16

// ErrTooManyEndpoints is an endpoint refused because its owner has MaxEndpoints already.
var ErrTooManyEndpoints = errors.New("the owner has as many webhook endpoints as it may have")

// RegisterEndpoint registers e with a new secret for s's owner, once per use of its key, with its
// record and answer (which alone shows the secret) in one transaction. The URL is checked for a
// new endpoint only (a retry gets its answer even if the host no longer resolves).
func (l *Ledger) RegisterEndpoint(ctx context.Context, s idempotency.Scope, fingerprint []byte, ttl time.Duration,
	urls webhook.Policy, e Endpoint, answer func(Endpoint) idempotency.Response) (resp idempotency.Response, replayed bool, id string, err error) {
	resp, replayed, id, err = idempotency.Once(ctx, l.DB, s, fingerprint, NewID("we_"), ttl, func(tx pgx.Tx, id string) (idempotency.Response, error) {
		if _, err := urls.Check(ctx, e.URL); err != nil {
			return idempotency.Response{}, &URLRefusedError{Reason: err}
		}
		e.ID, e.Secret = id, webhook.NewSecret()
		created, err := CreateEndpoint(ctx, tx, l.Keys, s.OwnerID, e)
		if err != nil {
			return idempotency.Response{}, err
		}
		// The answer shows the secret: it is stored sealed, and opened to be sent or replayed.
		r := answer(created)
		r.SealedWith, r.Body = l.Keys.Seal(r.Body, answerAAD(s))
		return r, nil
	})
	if err != nil || resp.SealedWith == "" { // an answer stored before sealing is plain
		return resp, replayed, id, err
	}
	if resp.Body, err = l.Keys.Open(resp.SealedWith, resp.Body, answerAAD(s)); err != nil {
		return resp, replayed, id, fmt.Errorf("the stored answer of webhook endpoint %s: %w", id, err)
	}
	resp.SealedWith = ""
	return resp, replayed, id, nil
}

// URLRefusedError is an endpoint's URL that the webhook URL policy refuses, and why.
type URLRefusedError struct{ Reason error }

func (e *URLRefusedError) Error() string {
	return "the webhook URL cannot be used: " + e.Reason.Error()
}

// Endpoints returns ownerID's endpoints that are not deleted, oldest first, without secrets.
func (l *Ledger) Endpoints(ctx context.Context, ownerID string) ([]Endpoint, error) {
	rows, err := l.DB.Query(ctx, `SELECT id, url, event_types, created_at FROM webhook_endpoints
		WHERE owner_id = $1 AND deleted_at IS NULL ORDER BY created_at, id`, ownerID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Endpoint, error) {
		var e Endpoint
		err := row.Scan(&e.ID, &e.URL, &e.EventTypes, &e.CreatedAt)
		e.CreatedAt = UTC(e.CreatedAt)
		return e, err
	})
}

// DeleteEndpoint deletes ownerID's endpoint id and cancels its pending deliveries in one
// transaction: no event is sent to it afterwards, except one being sent at that moment.
func (l *Ledger) DeleteEndpoint(ctx context.Context, ownerID, id string) error {
	return l.InTx(ctx, func(tx pgx.Tx) error {
		// Under the owner's feed lock, no event of the owner's is between queueing a delivery for
		// it and its commit.
		if err := lockOwner(ctx, tx, ownerID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET deleted_at = now()
			WHERE id = $1 AND owner_id = $2 AND deleted_at IS NULL`, id, ownerID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_deliveries SET status = 'canceled' WHERE endpoint_id = $1 AND status = 'pending'`, id)
		return err
	})
}

// Target is where an endpoint's deliveries go: what its delivery workflow needs.
type Target struct {
	ID      string
	URL     string
	Secret  string
	Deleted bool
}

// Target returns endpoint id's URL, secret (opened) and whether it was deleted.
func (l *Ledger) Target(ctx context.Context, id string) (Target, error) {
	t := Target{ID: id}
	var (
		plain, keyID *string
		sealed       []byte
	)
	err := l.DB.QueryRow(ctx, `SELECT url, secret, secret_key, secret_sealed, deleted_at IS NOT NULL FROM webhook_endpoints WHERE id = $1`, id).
		Scan(&t.URL, &plain, &keyID, &sealed, &t.Deleted)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return t, ErrNotFound
	case err != nil:
		return t, err
	case plain != nil: // stored before secrets were sealed, and not sealed since (SealSecrets)
		t.Secret = *plain
		return t, nil
	case l.Keys == nil:
		return t, ErrNoKeys
	}
	secret, err := l.Keys.Open(*keyID, sealed, secretAAD(id))
	if err != nil {
		return t, fmt.Errorf("the secret of webhook endpoint %s: %w", id, err)
	}
	t.Secret = string(secret)
	return t, nil
}

// Delivery is an event due to an endpoint.
type Delivery struct {
	Seq      int64
	EventID  string
	Type     string
	Body     []byte
	Attempts int
}

// PendingDeliveries returns up to limit of endpoint's pending deliveries, in commit order.
func (l *Ledger) PendingDeliveries(ctx context.Context, endpoint string, limit int) ([]Delivery, error) {
	rows, err := l.DB.Query(ctx, `
		SELECT e.seq, e.id, e.type, e.body, d.attempts FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
		WHERE d.endpoint_id = $1 AND d.status = 'pending' ORDER BY d.event_seq LIMIT $2`, endpoint, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := row.Scan(&d.Seq, &d.EventID, &d.Type, &d.Body, &d.Attempts)
		return d, err
	})
}

// RecordAttempt records one attempt to deliver event seq to endpoint (status 0: no answer). A
// delivery canceled meanwhile stays so (canceled true); one recorded already is left as it was.
func (l *Ledger) RecordAttempt(ctx context.Context, endpoint string, seq int64, delivered bool, status int, problem string) (canceled bool, err error) {
	tag, err := l.DB.Exec(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = NULLIF($4, 0),
			last_error = NULLIF($5, ''),
			status = CASE WHEN $3 THEN 'delivered' ELSE status END,
			delivered_at = CASE WHEN $3 THEN now() END
		WHERE endpoint_id = $1 AND event_seq = $2 AND status = 'pending'`, endpoint, seq, delivered, status, problem)
	if err != nil || tag.RowsAffected() > 0 {
		return false, err
	}
	// Not pending any more: canceled with its endpoint, or recorded already, by this very update
	// whose answer was lost (PostgreSQL cut off after the commit) or by another attempt (on a
	// worker presumed dead that was only paused). Only the first ends the endpoint's run.
	var now string
	err = l.DB.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE endpoint_id = $1 AND event_seq = $2`, endpoint, seq).Scan(&now)
	return now == "canceled", err
}

// EndpointsBehind returns the endpoints, not deleted, with a delivery pending since longer than
// olderThan: those whose workflow the recovery pass makes sure is running.
func (l *Ledger) EndpointsBehind(ctx context.Context, olderThan time.Duration) ([]string, error) {
	rows, err := l.DB.Query(ctx, `
		SELECT w.id FROM webhook_endpoints w
		WHERE w.deleted_at IS NULL AND EXISTS (
			SELECT 1 FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq
			WHERE d.endpoint_id = w.id AND d.status = 'pending' AND e.created_at < now() - $1::interval)
		ORDER BY w.id`, olderThan)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SealSecrets seals with keys' first key, in one transaction, every endpoint secret (and stored
// answer showing one) stored plain or with an older key, so that a rotated-out key can be retired.
func SealSecrets(ctx context.Context, db *pgxpool.Pool, keys *keyring.Ring) (n int, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		n = 0
		endpoints, err := unsealed(ctx, tx, keys, `SELECT id, '', '', '', secret, secret_key, secret_sealed
			FROM webhook_endpoints WHERE secret IS NOT NULL OR secret_key <> $1 FOR UPDATE`)
		if err != nil {
			return err
		}
		for _, x := range endpoints {
			keyID, sealed, err := x.reseal(keys, secretAAD(x.id))
			if err == nil {
				_, err = tx.Exec(ctx, `UPDATE webhook_endpoints SET secret = NULL, secret_key = $2, secret_sealed = $3 WHERE id = $1`,
					x.id, keyID, sealed)
			}
			if err != nil {
				return fmt.Errorf("webhook endpoint %s: %w", x.id, err)
			}
		}
		answers, err := unsealed(ctx, tx, keys, `SELECT resource_id, owner_id, route, key,
			CASE WHEN body_key IS NULL THEN convert_from(body, 'UTF8') END, body_key, body
			FROM idempotency_records WHERE route = '`+idempotency.RouteEndpoints+`' AND status_code = 201
			AND (body_key IS NULL OR body_key <> $1) FOR UPDATE`)
		if err != nil {
			return err
		}
		for _, x := range answers {
			keyID, sealed, err := x.reseal(keys, answerAAD(x.scope))
			if err == nil {
				_, err = tx.Exec(ctx, `UPDATE idempotency_records SET body_key = $4, body = $5
					WHERE owner_id = $1 AND route = $2 AND key = $3`, x.scope.OwnerID, x.scope.Route, x.scope.Key, keyID, sealed)
			}
			if err != nil {
				return fmt.Errorf("the stored answer of webhook endpoint %s: %w", x.id, err)
			}
		}
		n = len(endpoints) + len(answers)
		return nil
	})
	return n, err
}

// storedSecret is a secret as SealSecrets finds it: in plaintext, or sealed with keyID.
type storedSecret struct {
	id     string
	scope  idempotency.Scope // of a stored answer
	plain  *string
	keyID  *string
	sealed []byte
}

func unsealed(ctx context.Context, tx pgx.Tx, keys *keyring.Ring, query string) ([]storedSecret, error) {
	rows, _ := tx.Query(ctx, query, keys.KeyID())
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedSecret, error) {
		var x storedSecret
		return x, r.Scan(&x.id, &x.scope.OwnerID, &x.scope.Route, &x.scope.Key, &x.plain, &x.keyID, &x.sealed)
	})
}

// reseal seals the secret with keys' first key, opening it first if it is sealed.
func (x storedSecret) reseal(keys *keyring.Ring, aad []byte) (keyID string, sealed []byte, err error) {
	plain := []byte(nil)
	if x.plain != nil {
		plain = []byte(*x.plain)
	} else if plain, err = keys.Open(*x.keyID, x.sealed, aad); err != nil {
		return "", nil, err
	}
	keyID, sealed = keys.Seal(plain, aad)
	return keyID, sealed, nil
}
