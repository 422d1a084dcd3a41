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
	scope, err := idempotencyScope(c, idempotency.RouteAccounts)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeAccount(body(c))
	if err != nil {
		return err
	}
	answer, replayed, _, err := s.createOnce(c, scope, fp, "acc_", func(tx pgx.Tx, id string) (idempotency.Response, error) {
		acc, err := ledger.CreateAccount(c.Request().Context(), tx, id, owner(c), req.Currency, req.Name, req.Metadata)
		return jsonAnswer(http.StatusCreated, "/v1/accounts/"+acc.ID, acc), err
	})
	if err != nil {
		return err
	}
	return respond(c, answer, replayed)
}

// createOnce creates a resource once per use of an Idempotency-Key: in one transaction, it
// claims scope for a new id with prefix, runs create with it, and stores the answer create made;
// a duplicate waits on the claim's row lock, then gets the stored answer (replayed). It returns
// the resource's id either way.
func (s *Server) createOnce(c echo.Context, scope idempotency.Scope, fp []byte, prefix string,
	create func(tx pgx.Tx, id string) (idempotency.Response, error)) (answer idempotency.Response, replayed bool, id string, err error) {
	ctx := c.Request().Context()
	err = pgx.BeginFunc(ctx, s.DB, func(tx pgx.Tx) error {
		rec, created, err := idempotency.Claim(ctx, tx, scope, fp, ledger.NewID(prefix))
		if err != nil {
			return err
		}
		id = rec.ResourceID
		if !created {
			if rec.Response == nil { // cannot happen: the claim and the response commit together
				return errors.New(scope.Route + " record without response")
			}
			answer, replayed = *rec.Response, true
			return nil
		}
		if answer, err = create(tx, id); err != nil {
			return err
		}
		return idempotency.Complete(ctx, tx, scope, answer, s.TTL)
	})
	return answer, replayed, id, err
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

// limitParam is a list's page size: the query's limit, 1 to 200, or 50.
func limitParam(c echo.Context) (int, error) {
	v := c.QueryParam("limit")
	if v == "" {
		return 50, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 200 {
		return 0, problem.Invalid("limit must be an integer from 1 to 200", problem.FieldError{Field: "limit", Message: "must be 1 to 200"})
	}
	return n, nil
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
