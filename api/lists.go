package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
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

// listAuthorizations is GET /v1/authorizations: the authorizations that touch the caller's
// accounts, newest first.
func (s *Server) listAuthorizations(c echo.Context) error {
	f, err := s.listFilter(c, []string{"pending", "authorized", "captured", "voided", "expired", "rejected"})
	if err != nil {
		return err
	}
	page, err := s.Ledger.Authorizations(c.Request().Context(), owner(c), f)
	if err != nil {
		return listError(err)
	}
	return c.JSON(http.StatusOK, page)
}
