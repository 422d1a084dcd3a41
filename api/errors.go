package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/outage"
	"github.com/payments/payments/internal/problem"
)

// problemFor is the one place where an error from below the API becomes the problem+json a
// client reads. It decides from the error, not from where it happened: a value PostgreSQL
// cannot store is the client's error (400), an unreachable dependency is 503 with Retry-After,
// and anything else is 500, logged.
func problemFor(err error) *problem.Problem {
	var (
		p      *problem.Problem
		he     *echo.HTTPError
		inUse  *operation.InUseError
		failed *operation.FailedError
	)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &he):
		return fromHTTPError(he)
	case errors.Is(err, idempotency.ErrReused):
		return problem.KeyReused()
	case errors.As(err, &inUse):
		p = problem.New(http.StatusConflict, "idempotency-key-in-use",
			"the first request with this Idempotency-Key is still being processed; retry later")
		if inUse.EarlierUse {
			p.Detail = "an earlier operation under this Idempotency-Key is still running; retry later"
		}
		p.RetryAfter = 1
		p.WorkflowID = inUse.WorkflowID
		nameOperation(p, inUse.Kind, inUse.ID)
		return p
	case errors.As(err, &failed):
		return failedProblem(failed)
	case database.BadInput(err):
		return problem.Invalid("the request holds a value that cannot be stored, such as a NUL character")
	}
	if p := refusal(err); p != nil {
		return p
	}
	if o, ok := outage.As(err); ok {
		return problem.Unavailable(o.Dependency+unreachable, err)
	}
	if database.Unavailable(err) {
		return problem.Unavailable("PostgreSQL"+unreachable, err)
	}
	p = problem.New(http.StatusInternalServerError, "internal-error", "an unexpected error occurred; it has been logged")
	p.Cause = err
	return p
}

// failedProblem is the 500 of an operation whose run ended without moving money: its type and
// resource member say which kind it was.
func failedProblem(failed *operation.FailedError) *problem.Problem {
	p := problem.New(http.StatusInternalServerError, string(failed.Kind)+"-failed",
		"the "+string(failed.Kind)+" failed after its retries and moved no money; retry with the same Idempotency-Key to run it again")
	p.WorkflowID = failed.WorkflowID
	nameOperation(p, failed.Kind, failed.ID)
	return p
}

// nameOperation sets the member of p that names operation id, of kind.
func nameOperation(p *problem.Problem, kind operation.Kind, id string) {
	switch kind {
	case operation.KindRefund:
		p.RefundID = id
	case operation.KindPayout:
		p.PayoutID = id
	case operation.KindAuthorization:
		p.AuthorizationID = id
	case operation.KindScheduled:
		p.ScheduledTransferID = id
	default:
		p.TransferID = id
	}
}

// refusal is the 4xx of a request the ledger refused, or nil for any other error.
func refusal(err error) *problem.Problem {
	var (
		badURL        *ledger.URLRefusedError
		notRefundable *ledger.NotRefundableError
		exceeds       *ledger.RefundExceedsError
		p             *problem.Problem
	)
	switch {
	case errors.As(err, &badURL):
		return problem.Invalid("the webhook URL cannot be used", problem.FieldError{Field: "url", Message: badURL.Reason.Error()})
	case errors.Is(err, ledger.ErrPayoutNotHeld):
		p = problem.New(http.StatusConflict, "payout-pending",
			"the payout's money is not held yet; send the same request again in a moment")
		p.RetryAfter = 1
	case errors.Is(err, ledger.ErrNotHeld):
		p = problem.New(http.StatusConflict, "authorization-pending",
			"the authorization's money is not held yet; send the same request again in a moment")
		p.RetryAfter = 1
	case errors.Is(err, ledger.ErrTooManyEndpoints):
		return problem.New(http.StatusUnprocessableEntity, "too-many-webhook-endpoints", fmt.Sprintf(
			"you have %d webhook endpoints, as many as you may have; delete one first", ledger.MaxEndpoints))
	case errors.As(err, &notRefundable):
		why := "is " + string(notRefundable.Status) + ": only a completed transfer can be refunded"
		if notRefundable.Deposit {
			why = "is a deposit, which is not refunded through the API"
		}
		p = problem.New(http.StatusUnprocessableEntity, "transfer-not-refundable", "transfer "+notRefundable.TransferID+" "+why)
		p.TransferID = notRefundable.TransferID
	case errors.As(err, &exceeds):
		p = problem.New(http.StatusUnprocessableEntity, "refund-exceeds-transfer",
			fmt.Sprintf("transfer %s has %d %s left to refund", exceeds.TransferID, exceeds.RemainingMinor, exceeds.Currency))
		p.TransferID = exceeds.TransferID
	}
	return p
}

const unreachable = " is unreachable; retry later (a POST with the same Idempotency-Key: nothing was done twice)"

// fromHTTPError maps the errors Echo raises itself; handlers return errors of their own.
func fromHTTPError(he *echo.HTTPError) *problem.Problem {
	switch he.Code {
	case http.StatusNotFound:
		return problem.NotFound("route")
	case http.StatusMethodNotAllowed:
		return problem.New(he.Code, "method-not-allowed", "this route does not take that method")
	case http.StatusRequestEntityTooLarge:
		return problem.New(he.Code, "payload-too-large", "request bodies are limited to 64 KiB")
	default:
		p := problem.New(http.StatusInternalServerError, "internal-error", "an unexpected error occurred; it has been logged")
		p.Cause = he
		return p
	}
}
