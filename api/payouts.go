package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/auth"
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
		KeyID: c.Get(ctxKey).(auth.Key).ID,
	})
	logOperation(c, answer.WorkflowID, operation.KindPayout, answer.ID)
	return respondSubmitted(c, answer, err, func(po ledger.Payout) idempotency.Response { return payoutResponse(http.StatusAccepted, po) })
}

// approvePayout sends a payout waiting for approval on to the bank, at a second key's word.
func (s *Server) approvePayout(c echo.Context) error {
	return s.decidePayout(c, idempotency.RouteApprove, ledger.VerdictApprove)
}

// rejectPayout fails a payout waiting for approval and releases its money, at a second key's word.
func (s *Server) rejectPayout(c echo.Context) error {
	return s.decidePayout(c, idempotency.RouteReject, ledger.VerdictReject)
}

// decidePayout has a key of the payout's owner (mayApprove let it through) decide on it: any
// other owner's key is answered 404, as for a payout that does not exist, and the key that
// created it 403 approval-not-allowed, neither stored. The ledger decides; a decision that comes
// after another, or on a payout that is not waiting, is 422 payout-not-pending-approval, stored.
func (s *Server) decidePayout(c echo.Context, route string, verdict ledger.Verdict) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, route)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeApproval(route, c.Param("id"), body(c))
	if err != nil {
		return err
	}
	po, err := s.Ledger.Payout(ctx, owner(c), req.PayoutID)
	if err != nil {
		return notFound(err, "payout")
	}
	key := c.Get(ctxKey).(auth.Key)
	if po.CreatedByKey == key.ID {
		p := problem.New(http.StatusForbidden, "approval-not-allowed", fmt.Sprintf(
			"key %s created payout %s; another key of its owner, with the %s scope, decides on it", key.ID, po.ID, auth.ScopeApprove))
		p.PayoutID = po.ID
		return p
	}
	if done, err := s.replayed(c, scope, fp); done || err != nil {
		return err
	}
	resp, replayed, err := s.Payouts.Decide(ctx, po, ledger.Approval{Verdict: verdict, KeyID: key.ID, Reason: req.Reason, Scope: scope}, fp)
	logOperation(c, po.WorkflowID, operation.KindPayout, po.ID)
	if err != nil {
		return err
	}
	return respond(c, resp, replayed)
}

func (s *Server) getPayout(c echo.Context) error {
	po, err := s.Ledger.Payout(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "payout")
	}
	return c.JSON(http.StatusOK, po)
}
