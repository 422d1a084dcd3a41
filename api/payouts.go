package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/payouts"
)

func (s *Server) createPayout(c echo.Context) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, idempotency.RoutePayouts)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodePayout(body(c))
	if err != nil {
		return err
	}
	if done, err := s.replayed(c, scope, fp); done || err != nil {
		return err
	}
	acc, err := s.Ledger.Account(ctx, owner(c), req.AccountID)
	if err == nil && acc.Kind != ledger.KindCustomer {
		err = ledger.ErrNotFound
	}
	if err != nil {
		return notFound(err, "account")
	}
	if acc.Currency != req.Currency {
		return problem.New(http.StatusUnprocessableEntity, "currency-mismatch",
			"the payout is in "+req.Currency+" but account "+acc.ID+" holds "+acc.Currency)
	}
	answer, err := s.Payouts.Submit(ctx, payouts.Request{
		Scope: scope, Fingerprint: fp, AccountID: acc.ID, AmountMinor: req.AmountMinor, Currency: req.Currency,
		Destination: bank.Destination(req.Destination), Description: req.Description, Metadata: req.Metadata,
	})
	logOperation(c, answer.WorkflowID, operation.KindPayout, answer.ID)
	return respondSubmitted(c, answer, err, func(po ledger.Payout) idempotency.Response { return payoutResponse(http.StatusAccepted, po) })
}

func (s *Server) getPayout(c echo.Context) error {
	po, err := s.Ledger.Payout(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "payout")
	}
	return c.JSON(http.StatusOK, po)
}
