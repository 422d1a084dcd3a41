package ledger

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// WithoutEvents is l writing no events: the baseline BenchmarkPost measures events against.
func WithoutEvents(l *Ledger) *Ledger {
	c := *l
	c.noEvents = true
	return &c
}

// WriteEvent writes, in tx, an event of type typ about objectID seen by the owners of accounts,
// as a change does just before it commits: so that a test can hold a transaction open after it.
func WriteEvent(ctx context.Context, tx pgx.Tx, typ, objectID string, accounts ...string) error {
	o := &outbox{}
	o.add(typ, objectID, map[string]string{"id": objectID}, accounts...)
	_, err := flushEvents(ctx, tx, o)
	return err
}
