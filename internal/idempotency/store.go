package idempotency

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/database"
)

// Response is what is replayed: the status, the headers that matter and the body, byte for byte.
type Response struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Location    string `json:"location,omitempty"`
	Body        Body   `json:"body"`
	SealedWith  string `json:"sealed_with,omitempty"` // the key that sealed a Body showing a secret
}

// Record is the state of one scope.
type Record struct {
	Fingerprint []byte
	ResourceID  string    // the transfer or account the operation creates
	Response    *Response // nil while the operation has not finished
	CreatedAt   time.Time
}

// ErrReused means the key was first used with a different request.
var ErrReused = errors.New("idempotency key reused with a different request")

// recordColumns are the columns recordRow.dest receives, in its order.
const recordColumns = `fingerprint, resource_id, status_code, COALESCE(content_type, ''),
	COALESCE(location, ''), body, COALESCE(body_key, ''), created_at`

// recordRow receives one row of recordColumns (and any extra columns after them).
type recordRow struct {
	rec    Record
	status *int // NULL while the operation has not finished
	resp   Response
}

func (r *recordRow) dest(extra ...any) []any {
	return append([]any{&r.rec.Fingerprint, &r.rec.ResourceID, &r.status, &r.resp.ContentType,
		&r.resp.Location, &r.resp.Body, &r.resp.SealedWith, &r.rec.CreatedAt}, extra...)
}

func (r *recordRow) record() Record {
	if r.status != nil {
		r.resp.Status = *r.status
		r.rec.Response = &r.resp
	}
	return r.rec
}

// Claim writes the record of scope s before its operation starts, or returns the one there
// (ErrReused if another request's). An expired record counts until the cleanup deletes it (§3).
func Claim(ctx context.Context, db database.Querier, s Scope, fingerprint []byte, resourceID string) (rec Record, created bool, err error) {
	var row recordRow
	err = db.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO idempotency_records (owner_id, route, key, fingerprint, resource_id)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (owner_id, route, key) DO NOTHING
			RETURNING `+recordColumns+`, true AS created
		)
		SELECT * FROM ins
		UNION ALL
		SELECT `+recordColumns+`, false
		FROM idempotency_records
		WHERE owner_id = $1 AND route = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM ins)`,
		s.OwnerID, s.Route, s.Key, fingerprint, resourceID,
	).Scan(row.dest(&created)...)
	if errors.Is(err, pgx.ErrNoRows) {
		// The conflicting row was deleted between the insert and the read; try again.
		return Claim(ctx, db, s, fingerprint, resourceID)
	}
	if err != nil {
		return Record{}, false, err
	}
	rec = row.record()
	if !bytes.Equal(rec.Fingerprint, fingerprint) {
		return rec, false, ErrReused
	}
	return rec, created, nil
}

// Lookup returns the record of scope s, if any.
func Lookup(ctx context.Context, db database.Querier, s Scope) (rec Record, found bool, err error) {
	var row recordRow
	err = db.QueryRow(ctx, `
		SELECT `+recordColumns+` FROM idempotency_records
		WHERE owner_id = $1 AND route = $2 AND key = $3`,
		s.OwnerID, s.Route, s.Key,
	).Scan(row.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	return row.record(), true, nil
}

// Resolve completes scope s with its key when ScopeOf could not (a key too long for its workflow
// ID), from the record of operation resourceID; found is false when that record is gone.
func Resolve(ctx context.Context, db database.Querier, s Scope, resourceID string) (_ Scope, found bool, err error) {
	if s.Key != "" {
		return s, true, nil
	}
	err = db.QueryRow(ctx, `SELECT key FROM idempotency_records WHERE owner_id = $1 AND route = $2 AND resource_id = $3`,
		s.OwnerID, s.Route, resourceID).Scan(&s.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	return s, err == nil, err
}

// Complete stores the final response of scope s, to be replayed for ttl. Call it in the same
// transaction as the operation's effect, so that an effect never exists without its response.
func Complete(ctx context.Context, db database.Querier, s Scope, r Response, ttl time.Duration) error {
	_, err := db.Exec(ctx, `
		UPDATE idempotency_records
		SET status_code = $4, content_type = $5, location = $6, body = $7, body_key = NULLIF($9, ''),
		    completed_at = now(), expires_at = now() + $8::interval
		WHERE owner_id = $1 AND route = $2 AND key = $3`,
		s.OwnerID, s.Route, s.Key, r.Status, r.ContentType, r.Location, r.Body, ttl, r.SealedWith)
	return err
}

// DeleteExpired deletes up to limit records whose replay window has passed; their keys are new.
func DeleteExpired(ctx context.Context, db database.Querier, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM idempotency_records
		WHERE (owner_id, route, key) IN (
			SELECT owner_id, route, key FROM idempotency_records
			WHERE expires_at <= now()
			LIMIT $1
			FOR UPDATE SKIP LOCKED)`, limit)
	return tag.RowsAffected(), err
}

// Lock locks the record of scope s until the end of the transaction.
func Lock(ctx context.Context, tx pgx.Tx, s Scope) error {
	_, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_records
		WHERE owner_id = $1 AND route = $2 AND key = $3 FOR UPDATE`, s.OwnerID, s.Route, s.Key)
	return err
}
