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

	from, to, err := s.between(c, req.FromAccountID, req.ToAccountID, req.Currency, "transfer")
	if err != nil {
		return err
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

// between reads the two customer accounts money moves between for the caller, the source the
// caller's own, both in currency (what names the movement in the error). Funding accounts are
// the ledger's own: no customer's transfer takes money from or gives money to them.
func (s *Server) between(c echo.Context, fromID, toID, currency, what string) (from, to ledger.Account, err error) {
	from, to, err = s.Ledger.Accounts(c.Request().Context(), owner(c), fromID, toID)
	if err == nil && (from.Kind != ledger.KindCustomer || to.Kind != ledger.KindCustomer) {
		err = ledger.ErrNotFound
	}
	switch {
	case err != nil:
		return from, to, notFound(err, "account")
	case from.Currency != currency:
		return from, to, problem.New(http.StatusUnprocessableEntity, "currency-mismatch",
			"the "+what+" is in "+currency+" but account "+from.ID+" holds "+from.Currency)
	case to.Currency != currency:
		// The destination may be another owner's: say that it does not take this currency,
		// not which one it holds.
		return from, to, problem.New(http.StatusUnprocessableEntity, "currency-mismatch",
			"the "+what+" is in "+currency+", which the destination account does not hold")
	}
	return from, to, nil
}
