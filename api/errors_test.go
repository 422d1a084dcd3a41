package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/api/serviceerror"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/outage"
)

// The answer is decided by the error, not by where it happened: PostgreSQL's data exceptions
// are the client's (400), only an unreachable or unavailable dependency is 503, and anything
// else is a 500 that is logged, never a "retry" that fails for ever.
func TestProblemForDecidesFromTheError(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		slug   string
	}{
		{&pgconn.PgError{Code: "22021"}, 400, "invalid-request"}, // character not in repertoire (NUL)
		{fmt.Errorf("claim: %w", &pgconn.PgError{Code: "22P05"}), 400, "invalid-request"},
		{&pgconn.PgError{Code: "08006"}, 503, "service-unavailable"}, // connection failure
		{&pgconn.PgError{Code: "25006"}, 503, "service-unavailable"}, // read-only transaction
		{&pgconn.PgError{Code: "57P01"}, 503, "service-unavailable"}, // admin shutdown
		{&pgconn.PgError{Code: "40001"}, 503, "service-unavailable"}, // serialization, retries spent
		{&pgconn.ConnectError{}, 503, "service-unavailable"},
		{context.DeadlineExceeded, 503, "service-unavailable"},
		{outage.Of("Temporal", serviceerror.NewUnavailable("down")), 503, "service-unavailable"},
		{&pgconn.PgError{Code: "42P01"}, 500, "internal-error"}, // undefined table: our bug
		{&pgconn.PgError{Code: "23505"}, 500, "internal-error"},
		{errors.New("something else"), 500, "internal-error"},
		{idempotency.ErrReused, 422, "idempotency-key-reused"},
		{&operation.InUseError{ID: "tr_1"}, 409, "idempotency-key-in-use"},
		{&operation.FailedError{Kind: operation.KindTransfer, ID: "tr_1", WorkflowID: "transfer/o/k"}, 500, "transfer-failed"},
		{&operation.FailedError{Kind: operation.KindRefund, ID: "rf_1", WorkflowID: "refund/o/k"}, 500, "refund-failed"},
		{notFound(ledger.ErrNotFound, "account"), 404, "not-found"},
		{notFound(&pgconn.PgError{Code: "22021"}, "transfer"), 404, "not-found"},
	} {
		p := problemFor(c.err)
		if p.Status != c.status || p.Type != "/problems/"+c.slug {
			t.Errorf("%v: %d %s, want %d %s", c.err, p.Status, p.Type, c.status, c.slug)
		}
		if (p.Status == http.StatusServiceUnavailable || p.Status == http.StatusConflict) != (p.RetryAfter > 0) {
			t.Errorf("%v: Retry-After %d on a %d", c.err, p.RetryAfter, p.Status)
		}
	}
}
