package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/authorizations"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/problem"
)

// createAuthorization holds money on the caller's account for a payee (docs/contract.md §9).
func (s *Server) createAuthorization(c echo.Context) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, idempotency.RouteAuthorizations)
	if err != nil {
		return err
	}
	req, expiresIn, fp, err := request.DecodeAuthorization(body(c))
	if err != nil {
		return err
	}
	if done, err := s.replayed(c, scope, fp); done || err != nil {
		return err
	}
	from, to, err := s.between(c, req.FromAccountID, req.ToAccountID, req.Currency, "authorization")
	if err != nil {
		return err
	}
	answer, err := s.Authorizations.Submit(ctx, authorizations.Request{
		Scope: scope, Fingerprint: fp, From: from.ID, To: to.ID, AmountMinor: req.AmountMinor, Currency: req.Currency,
		ExpiresIn: expiresIn, Description: req.Description, Metadata: req.Metadata,
	})
	logOperation(c, answer.WorkflowID, operation.KindAuthorization, answer.ID)
	return respondSubmitted(c, answer, err, func(au ledger.Authorization) idempotency.Response {
		return authorizationResponse(http.StatusAccepted, au)
	})
}

// captureAuthorization moves what the payee takes of an authorization (all of it by default)
// and releases the rest.
func (s *Server) captureAuthorization(c echo.Context) error {
	scope, err := idempotencyScope(c, idempotency.RouteCapture)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeCapture(c.Param("id"), body(c))
	if err != nil {
		return err
	}
	d := ledger.Decision{Action: ledger.ActionCapture, Scope: scope}
	if req.AmountMinor != nil {
		d.AmountMinor = *req.AmountMinor
	}
	return s.decide(c, req, fp, d)
}

// voidAuthorization releases an authorization's money, at its payee's word.
func (s *Server) voidAuthorization(c echo.Context) error {
	scope, err := idempotencyScope(c, idempotency.RouteVoid)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeVoid(c.Param("id"), body(c))
	if err != nil {
		return err
	}
	return s.decide(c, req, fp, ledger.Decision{Action: ledger.ActionVoid, Scope: scope})
}

// decide runs decision d on the authorization req names, for its payee only: the owner of its
// destination account. Anyone else, the payer included, is answered 404, as for an
// authorization that does not exist. A capture above the authorized amount is refused here, and
// not stored: it could never be right.
func (s *Server) decide(c echo.Context, req request.Decision, fp []byte, d ledger.Decision) error {
	ctx := c.Request().Context()
	if done, err := s.replayed(c, d.Scope, fp); done || err != nil {
		return err
	}
	au, err := s.Ledger.Authorization(ctx, owner(c), req.AuthorizationID)
	if err == nil {
		_, err = s.Ledger.Account(ctx, owner(c), au.ToAccountID)
	}
	if err != nil {
		return notFound(err, "authorization")
	}
	if au.Status == ledger.AuthorizationPending { // not stored: the same request is to come again
		return ledger.ErrNotHeld
	}
	if d.AmountMinor > au.AmountMinor {
		p := problem.New(http.StatusUnprocessableEntity, "capture-exceeds-authorization",
			fmt.Sprintf("authorization %s holds %d %s; a capture takes at most that", au.ID, au.AmountMinor, au.Currency))
		p.AuthorizationID = au.ID
		return p
	}
	resp, replayed, err := s.Authorizations.Decide(ctx, au, d, fp)
	logOperation(c, au.WorkflowID, operation.KindAuthorization, au.ID)
	if err != nil {
		return err
	}
	return respond(c, resp, replayed)
}

func (s *Server) getAuthorization(c echo.Context) error {
	au, err := s.Ledger.Authorization(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "authorization")
	}
	return c.JSON(http.StatusOK, au)
}
