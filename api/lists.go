package api

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/internal/ledger"
)

// listTransfers is GET /v1/transfers: the caller's transfers, newest first (docs/contract.md §8).
func (s *Server) listTransfers(c echo.Context) error {
	return listed(s, c, []string{"pending", "completed", "rejected", "failed"}, s.Ledger.Transfers, "scheduled_transfer_id")
}

// listPayouts is GET /v1/payouts: the payouts of the caller's accounts, newest first.
func (s *Server) listPayouts(c echo.Context) error {
	return listed(s, c, []string{"processing", "paid", "failed", "returned"}, s.Ledger.Payouts)
}

// listAuthorizations is GET /v1/authorizations: the authorizations that touch the caller's
// accounts, newest first.
func (s *Server) listAuthorizations(c echo.Context) error {
	return listed(s, c, []string{"pending", "authorized", "captured", "voided", "expired", "rejected"}, s.Ledger.Authorizations)
}

// listed answers a list: the page fetch reads for the caller with the query's filter (statuses
// are those the filter takes, extra the parameters this list takes beside listParams).
func listed[T any](s *Server, c echo.Context, statuses []string,
	fetch func(ctx context.Context, ownerID string, f ledger.Filter) (ledger.Page[T], error), extra ...string) error {
	f, err := s.listFilter(c, statuses, extra...)
	if err != nil {
		return err
	}
	page, err := fetch(c.Request().Context(), owner(c), f)
	if err != nil {
		return listError(err)
	}
	return c.JSON(http.StatusOK, page)
}
