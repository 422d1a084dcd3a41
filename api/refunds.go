package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/transfers"
)

// createRefund gives money back from a transfer's destination to its source, at the request of
// the destination's owner (docs/contract.md §8). It runs as a transfer does: claimed under its
// key, posted once by its own workflow. What is checked here (the transfer is the caller's to
// refund, completed, with enough left) is checked again in the posting's transaction, which
// alone decides a race between refunds. A refund of all that remains (amount_minor left out)
// takes what remains there, under the transfer's lock: what remains here is only what its
// claim shows until it posts.
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

	t, err := s.refundable(c, req.TransferID)
	if err != nil {
		return err
	}
	remaining := t.AmountMinor - t.AmountRefundedMinor
	amount := remaining
	if req.AmountMinor != nil {
		amount = *req.AmountMinor
	}
	if amount > remaining || remaining == 0 {
		// What is left may be less because this very refund, a duplicate's, has just posted:
		// its claim then exists, and Submit answers with its outcome.
		_, claimed, err := idempotency.Lookup(ctx, s.DB, scope)
		if err != nil {
			return err
		}
		if !claimed {
			return exceeds(t, remaining)
		}
	}
	answer, err := s.submit(c, transfers.Request{
		Scope: scope, Fingerprint: fp, From: t.ToAccountID, To: t.FromAccountID, AmountMinor: amount,
		Currency: t.Currency, Description: req.Description, Metadata: req.Metadata, RefundOf: t.ID,
		RefundRemaining: req.AmountMinor == nil,
	})
	if err != nil {
		return err
	}
	if answer.Pending != nil {
		return respond(c, pendingAnswer(*answer.Pending), false)
	}
	return respond(c, answer.Response, answer.Replayed)
}

// refundable returns transfer id if the caller may refund it: it is a transfer between
// customers' accounts (not a deposit), completed, into an account of the caller's. Anyone else
// gets 404, as for a transfer they cannot see.
func (s *Server) refundable(c echo.Context, id string) (ledger.Transfer, error) {
	ctx := c.Request().Context()
	t, err := s.Ledger.Transfer(ctx, owner(c), id)
	if err != nil {
		return t, notFound(err, "transfer")
	}
	from, to, err := s.Ledger.Accounts(ctx, "", t.FromAccountID, t.ToAccountID)
	if err != nil {
		return t, err
	}
	switch {
	case to.OwnerID != owner(c):
		return t, problem.NotFound("transfer")
	case from.Kind != ledger.KindCustomer || to.Kind != ledger.KindCustomer:
		return t, notRefundable(t, "is a deposit, which is not refunded through the API")
	case t.Status != ledger.TransferCompleted:
		return t, notRefundable(t, "is "+string(t.Status)+": only a completed transfer can be refunded")
	}
	return t, nil
}

func exceeds(t ledger.Transfer, remaining int64) *problem.Problem {
	p := problem.New(http.StatusUnprocessableEntity, "refund-exceeds-transfer",
		fmt.Sprintf("transfer %s has %d %s left to refund", t.ID, remaining, t.Currency))
	p.TransferID = t.ID
	return p
}

func notRefundable(t ledger.Transfer, why string) *problem.Problem {
	p := problem.New(http.StatusUnprocessableEntity, "transfer-not-refundable", "transfer "+t.ID+" "+why)
	p.TransferID = t.ID
	return p
}

func (s *Server) getRefund(c echo.Context) error {
	r, err := s.Ledger.Refund(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "refund")
	}
	return c.JSON(http.StatusOK, r)
}
