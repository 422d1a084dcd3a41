package idempotency

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Once creates a resource once per use of a key, in one transaction: it claims s for newID, runs
// create and stores its answer. A duplicate waits on the claim's row lock, then gets the stored
// answer. An error from create rolls the claim back: nothing is stored.
func Once(ctx context.Context, db *pgxpool.Pool, s Scope, fingerprint []byte, newID string, ttl time.Duration,
	create func(tx pgx.Tx, id string) (Response, error)) (answer Response, replayed bool, id string, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rec, created, err := Claim(ctx, tx, s, fingerprint, newID)
		if err != nil {
			return err
		}
		id = rec.ResourceID
		if !created {
			if rec.Response == nil { // cannot happen: the claim and the response commit together
				return errors.New(s.Route + " record without response")
			}
			answer, replayed = *rec.Response, true
			return nil
		}
		if answer, err = create(tx, id); err != nil {
			return err
		}
		return Complete(ctx, tx, s, answer, ttl)
	})
	return answer, replayed, id, err
}
