package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
)

// createAccount opens an account. The account, its idempotency record and the stored response
// are written in one transaction: a duplicate waits on the first one's row lock, then replays.
func (s *Server) createAccount(c echo.Context) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, idempotency.RouteAccounts)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeAccount(body(c))
	if err != nil {
		return err
	}

	var answer idempotency.Response
	replayed := false
	err = pgx.BeginFunc(ctx, s.DB, func(tx pgx.Tx) error {
		rec, created, err := idempotency.Claim(ctx, tx, scope, fp, ledger.NewID("acc_"))
		if err != nil {
			return err
		}
		if !created {
			if rec.Response == nil { // cannot happen: the claim and the response commit together
				return errors.New("account record without response")
			}
			answer, replayed = *rec.Response, true
			return nil
		}
		acc, err := ledger.CreateAccount(ctx, tx, rec.ResourceID, owner(c), req.Currency, req.Name)
		if err != nil {
			return err
		}
		answer = jsonAnswer(http.StatusCreated, "/v1/accounts/"+acc.ID, acc)
		return idempotency.Complete(ctx, tx, scope, answer, s.TTL)
	})
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
	limit := 50
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			return problem.Invalid("limit must be an integer from 1 to 200", problem.FieldError{Field: "limit", Message: "must be 1 to 200"})
		}
		limit = n
	}
	page, err := s.Ledger.Entries(ctx, c.Param("id"), c.QueryParam("cursor"), limit)
	if errors.Is(err, ledger.ErrBadCursor) {
		return problem.Invalid("cursor is not one this API returned", problem.FieldError{Field: "cursor", Message: "invalid"})
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}

// respond writes a stored or fresh answer exactly as it is stored.
func respond(c echo.Context, r idempotency.Response, replayed bool) error {
	h := c.Response().Header()
	if r.Location != "" {
		h.Set(echo.HeaderLocation, r.Location)
	}
	if replayed {
		h.Set("Idempotent-Replayed", "true")
		replays.WithLabelValues(c.Path()).Inc()
	}
	return c.Blob(r.Status, r.ContentType, r.Body)
}
