package api

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
)

// listTransfers is GET /v1/transfers: the caller's transfers, newest first (docs/contract.md §8).
func (s *Server) listTransfers(c echo.Context) error {
	f, err := s.listFilter(c, []string{"pending", "completed", "rejected", "failed"})
	if err != nil {
		return err
	}
	page, err := s.Ledger.Transfers(c.Request().Context(), owner(c), f)
	if err != nil {
		return listError(err)
	}
	return c.JSON(http.StatusOK, page)
}

// listPayouts is GET /v1/payouts: the payouts of the caller's accounts, newest first.
func (s *Server) listPayouts(c echo.Context) error {
	f, err := s.listFilter(c, []string{"processing", "paid", "failed", "returned"})
	if err != nil {
		return err
	}
	page, err := s.Ledger.Payouts(c.Request().Context(), owner(c), f)
	if err != nil {
		return listError(err)
	}
	return c.JSON(http.StatusOK, page)
}

// listParams are the query parameters of the lists of transfers and payouts.
var listParams = []string{"account_id", "status", "created_after", "created_before", "limit", "cursor"}

// queryParams refuses a query (400 invalid-request) that does not parse, or has a parameter
// other than names, or one of them more than once: a list that ignored a misspelled filter (or
// one in a pair that does not parse, which url.Values drops) would answer with more than was
// asked for, and one that picked among repeated values would guess. An empty value is the
// parameter left out.
func queryParams(c echo.Context, names ...string) error {
	query, err := url.ParseQuery(c.Request().URL.RawQuery)
	if err != nil {
		return problem.Invalid("the query does not parse: "+err.Error(), problem.FieldError{Field: "query", Message: "must be name=value pairs joined by &, percent-encoded"})
	}
	var fields []problem.FieldError
	for name, values := range query {
		switch {
		case !slices.Contains(names, name):
			fields = append(fields, problem.FieldError{Field: name, Message: "is not a parameter here; the parameters are " + strings.Join(names, ", ")})
		case len(values) > 1:
			fields = append(fields, problem.FieldError{Field: name, Message: "is given more than once"})
		}
	}
	if len(fields) == 0 {
		return nil
	}
	slices.SortFunc(fields, func(a, b problem.FieldError) int { return strings.Compare(a.Field, b.Field) })
	return problem.Invalid("the query has parameters this route does not take", fields...)
}

// listFilter reads a list's query: account_id (one of the caller's accounts, else 404),
// status (one of statuses), created_after and created_before (RFC 3339), limit and cursor.
func (s *Server) listFilter(c echo.Context, statuses []string) (ledger.Filter, error) {
	var f ledger.Filter
	if err := queryParams(c, listParams...); err != nil {
		return f, err
	}
	var err error
	if f.Limit, err = limitParam(c); err != nil {
		return f, err
	}
	f.Cursor, f.AccountID, f.Status = c.QueryParam("cursor"), c.QueryParam("account_id"), c.QueryParam("status")
	var fields []problem.FieldError
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		fields = append(fields, problem.FieldError{Field: "status", Message: "must be one of " + strings.Join(statuses, ", ")})
	}
	for _, b := range []struct {
		name string
		dst  **time.Time
	}{{"created_after", &f.CreatedAfter}, {"created_before", &f.CreatedBefore}} {
		if v := c.QueryParam(b.name); v != "" {
			at, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				fields = append(fields, problem.FieldError{Field: b.name, Message: "must be an RFC 3339 time, e.g. 2026-12-01T10:00:00Z"})
			}
			*b.dst = &at // the year 1 too: a bound, not "no bound"
		}
	}
	if len(fields) > 0 {
		return f, problem.Invalid("the list's query has invalid parameters", fields...)
	}
	if f.AccountID != "" {
		if _, err := s.Ledger.Account(c.Request().Context(), owner(c), f.AccountID); err != nil {
			return f, notFound(err, "account")
		}
	}
	return f, nil
}

// listError answers a cursor a list did not make as 400; other errors as they are.
func listError(err error) error {
	if errors.Is(err, ledger.ErrBadCursor) {
		return problem.Invalid("cursor is not one this API returned", problem.FieldError{Field: "cursor", Message: "invalid"})
	}
	return err
}
