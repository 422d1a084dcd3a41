package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/problem"
)

// bankEvent receives a bank callback (docs/contract.md §6). The signature is checked over the
// raw body, and that same body, decoded once, is what is acted on. A verified event is answered
// 2xx whether it is new, a duplicate, or matches nothing (the bank would otherwise send it
// again for ever); its effect happens at most once, because each effect is keyed by the event:
// an Update with the event's id to a payout's run, the workflow ID payin/<event id> for a
// credit. Only when the effect could not be handed on (PostgreSQL or Temporal unreachable) is it
// answered 503, so that the bank sends it again.
func (s *Server) bankEvent(c echo.Context) error {
	ctx := c.Request().Context()
	raw := body(c)
	e, err := bank.ReadEvent(s.BankSecret, c.Request().Header.Get(bank.SignatureHeader), raw, time.Now())
	if errors.Is(err, bank.ErrSignature) {
		s.Log.WarnContext(ctx, "bank callback refused", "err", err, "request_id", requestID(c))
		return problem.New(http.StatusUnauthorized, "unauthorized", "the Bank-Signature does not verify")
	}
	if err != nil { // signed by the bank, but not an event: taking it again would not help
		s.Log.ErrorContext(ctx, "a signed bank callback that is not an event", "err", err, "request_id", requestID(c))
		return c.JSON(http.StatusOK, map[string]string{"outcome": "malformed"})
	}
	if err := s.Ledger.RecordBankEvent(ctx, e.ID, e.Type, raw); err != nil {
		return err
	}
	outcome := "ignored: not an event this processor acts on"
	switch e.Type {
	case bank.PaymentPaid, bank.PaymentFailed, bank.PaymentReturned:
		outcome, err = s.Payouts.Deliver(ctx, e)
	case bank.CreditReceived:
		outcome, err = s.Payins.Receive(ctx, e)
	}
	if err != nil {
		return err
	}
	if err := s.Ledger.NoteBankEvent(ctx, e.ID, outcome); err != nil {
		return err
	}
	s.Log.InfoContext(ctx, "bank event", "event_id", e.ID, "type", e.Type, "reference", e.Data.Reference, "outcome", outcome)
	return c.JSON(http.StatusOK, map[string]string{"id": e.ID, "outcome": outcome})
}
