package api

import (
	"errors"
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
		p.SetResource(inUse.ID)
		return p
	case errors.As(err, &failed):
		return failedProblem(failed)
	case database.BadInput(err):
		return problem.Invalid("the request holds a value that cannot be stored, such as a NUL character")
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
	if failed.Kind == operation.KindRefund {
		p.RefundID = failed.ID
	} else {
		p.TransferID = failed.ID
	}
	return p
}

const unreachable = " is unreachable; retry later (a POST with the same Idempotency-Key: nothing was done twice)"

// notFound turns a lookup's "no such object" into 404 not-found for what; an identifier that
// PostgreSQL cannot even compare (a NUL in it) names no object either. Other errors pass.
func notFound(err error, what string) error {
	if errors.Is(err, ledger.ErrNotFound) || database.BadInput(err) {
		return problem.NotFound(what)
	}
	return err
}

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
