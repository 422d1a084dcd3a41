package database

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payments/payments/internal/outage"
)

// BadInput reports whether PostgreSQL refused err's statement for a value it cannot take: a data
// exception (SQLSTATE class 22), such as a NUL character in text. Such a value came from the
// caller, and the same request fails the same way every time: it is the caller's error, never
// "retry later".
func BadInput(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// Unavailable reports whether err means PostgreSQL could not be reached or could not do the work
// just now, so that the same request may succeed later: a connection that failed, broke or timed
// out; a server shutting down, starting up or out of connections; a read-only server (an old
// primary during a failover); a lock or statement timeout; a serialization failure or deadlock
// that outlasted its retries. Any other error is a fault of the statement or of the code.
func Unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"40", // serialization failure, deadlock
			"53", // insufficient resources: too many connections, disk full
			"57": // operator intervention: shutdown, cannot connect now, statement timeout
			return true
		}
		return pgErr.Code == "25006" || // read_only_sql_transaction
			pgErr.Code == "55P03" // lock_not_available
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgconn.ErrConnClosed)
}

// Outage marks err as a PostgreSQL outage when it is one (Unavailable), and returns it unchanged
// otherwise: an outage already named (Temporal's, met inside a transaction) keeps its name.
func Outage(err error) error {
	if _, named := outage.As(err); named {
		return err
	}
	if err != nil && Unavailable(err) {
		return outage.Of("PostgreSQL", err)
	}
	return err
}

// Outlast calls f again while it fails because PostgreSQL is unavailable (Unavailable), with
// waits growing from 50 ms to 1 s, for at most within; it returns f's last result. For work
// whose progress a blip would otherwise throw away: a webhook batch that has sent an event and
// has only to record it.
func Outlast[T any](ctx context.Context, within time.Duration, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(within)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		v, err := f()
		if err == nil || !Unavailable(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
	}
}
