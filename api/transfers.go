package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/transfers"
)

func (s *Server) createTransfer(c echo.Context) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, idempotency.RouteTransfers)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeTransfer(body(c))
	if err != nil {
		return err
	}

	if done, err := s.replayed(c, scope, fp); done || err != nil {
		return err
	}

	// Funding accounts are the ledger's own: no customer's transfer takes money from or gives
	// money to them.
	from, to, err := s.Ledger.Accounts(ctx, owner(c), req.FromAccountID, req.ToAccountID)
	if err == nil && (from.Kind != ledger.KindCustomer || to.Kind != ledger.KindCustomer) {
		err = ledger.ErrNotFound
	}
	if err != nil {
		return notFound(err, "account")
	}
	switch {
	case from.Currency != req.Currency:
		return problem.New(http.StatusUnprocessableEntity, "currency-mismatch",
			"the transfer is in "+req.Currency+" but account "+from.ID+" holds "+from.Currency)
	case to.Currency != req.Currency:
		// The destination may be another owner's: say that it does not take this currency,
		// not which one it holds.
		return problem.New(http.StatusUnprocessableEntity, "currency-mismatch",
			"the transfer is in "+req.Currency+", which the destination account does not hold")
	}
	answer, err := s.submit(c, transfers.Request{
		Scope: scope, Fingerprint: fp, From: from.ID, To: to.ID,
		AmountMinor: req.AmountMinor, Currency: req.Currency, Description: req.Description, Metadata: req.Metadata,
	})
	if err != nil {
		return err
	}
	if answer.Pending != nil {
		outcomes.WithLabelValues(string(ledger.TransferPending)).Inc()
		return respond(c, pendingAnswer(*answer.Pending), false)
	}
	if !answer.Replayed {
		outcomes.WithLabelValues(string(outcomeOf(answer.Status))).Inc()
	}
	return respond(c, answer.Response, answer.Replayed)
}

func (s *Server) getTransfer(c echo.Context) error {
	t, err := s.Ledger.Transfer(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "transfer")
	}
	return c.JSON(http.StatusOK, t)
}
