package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/transfers"
)

// createRefund gives money back from a transfer's destination to its source, at the request of
// the destination's owner (docs/contract.md §8). It runs as a transfer does: claimed under its
// key, posted once by its own workflow. What the ledger checks first (ledger.Refundable: the
// transfer is the caller's to refund, completed, with enough left) is checked again in the
// posting's transaction, which alone decides a race between refunds. A refund of all that
// remains (amount_minor left out) takes what remains there, under the transfer's lock: what
// remains here is only what its claim shows until it posts.
func (s *Server) createRefund(c echo.Context) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, idempotency.RouteRefunds)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeRefund(c.Param("id"), body(c))
	if err != nil {
		return err
	}
	if done, err := s.replayed(c, scope, fp); done || err != nil {
		return err
	}
	t, amount, err := s.Ledger.Refundable(ctx, scope, req.TransferID, req.AmountMinor)
	if err != nil {
		return notFound(err, "transfer")
	}
	answer, err := s.submit(c, transfers.Request{
		Scope: scope, Fingerprint: fp, From: t.ToAccountID, To: t.FromAccountID, AmountMinor: amount,
		Currency: t.Currency, Description: req.Description, Metadata: req.Metadata, RefundOf: t.ID,
		RefundRemaining: req.AmountMinor == nil,
	})
	return respondSubmitted(c, answer, err, pendingAnswer)
}

func (s *Server) getRefund(c echo.Context) error {
	r, err := s.Ledger.Refund(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "refund")
	}
	return c.JSON(http.StatusOK, r)
}
