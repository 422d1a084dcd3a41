package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// createAccount opens an account. The account, its idempotency record and the stored response
// are written in one transaction: a duplicate waits on the first one's row lock, then replays.
func (s *Server) createAccount(c echo.Context) error {
	scope, err := idempotencyScope(c, idempotency.RouteAccounts)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeAccount(body(c))
	if err != nil {
		return err
	}
	answer, replayed, err := s.Ledger.OpenAccount(c.Request().Context(), scope, fp, s.TTL,
		ledger.Account{Currency: req.Currency, Name: req.Name, Metadata: req.Metadata}, accountAnswer)
	if err != nil {
		return err
	}
	return respond(c, answer, replayed)
}

func (s *Server) listAccounts(c echo.Context) error {
	accs, err := s.Ledger.OwnerAccounts(c.Request().Context(), owner(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": accs})
}

func (s *Server) getAccount(c echo.Context) error {
	acc, err := s.Ledger.Account(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "account")
	}
	return c.JSON(http.StatusOK, acc)
}

func (s *Server) listEntries(c echo.Context) error {
	ctx := c.Request().Context()
	if _, err := s.Ledger.Account(ctx, owner(c), c.Param("id")); err != nil {
		return notFound(err, "account")
	}
	if err := queryParams(c, "limit", "cursor"); err != nil {
		return err
	}
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	page, err := s.Ledger.Entries(ctx, c.Param("id"), c.QueryParam("cursor"), limit)
	if err != nil {
		return listError(err)
	}
	return c.JSON(http.StatusOK, page)
}
