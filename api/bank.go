package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/problem"
)

// bankEvent receives a bank callback (docs/contract.md §6): the signature is checked over the raw
// body, and that same body, decoded once and strictly, is acted on. A verified event is answered
// 2xx whatever it is (new, a duplicate, unmatched, malformed, conflicting: kept, no effect), or
// the bank would send it again for ever; each effect is keyed by the event id, so it happens at
// most once. Only when it could not be handed on (an outage) is it answered 503.
func (s *Server) bankEvent(c echo.Context) error {
	ctx := c.Request().Context()
	raw := body(c)
	e, err := bank.ReadEvent(s.BankSecret, c.Request().Header.Get(bank.SignatureHeader), raw, time.Now())
	if errors.Is(err, bank.ErrSignature) {
		s.Log.WarnContext(ctx, "bank callback refused", "err", err, "request_id", requestID(c))
		return problem.New(http.StatusUnauthorized, "unauthorized", "the Bank-Signature does not verify")
	}
	var bad *bank.Malformed
	if errors.As(err, &bad) {
		return s.malformedBankEvent(c, raw, bad)
	}
	if err != nil {
		return err
	}
	theEvent, err := s.Ledger.RecordBankEvent(ctx, e.ID, e.Type, raw)
	if err != nil {
		return err
	}
	if !theEvent {
		outcome := "conflict: another body was received first under this event id; this one has no effect"
		s.Log.WarnContext(ctx, "a bank event id sent again with another body", "event_id", e.ID, "type", e.Type, "request_id", requestID(c))
		return c.JSON(http.StatusOK, map[string]string{"id": e.ID, "outcome": outcome})
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

// malformedBankEvent keeps a signed callback that is no event, for operators, and answers it
// 200: the bank signed it, and sending it again would not make it an event.
func (s *Server) malformedBankEvent(c echo.Context, raw []byte, bad *bank.Malformed) error {
	ctx := c.Request().Context()
	id, err := s.Ledger.RecordMalformedBankEvent(ctx, raw, bad.Reason)
	if err != nil {
		return err
	}
	s.Log.ErrorContext(ctx, "a signed bank callback that is not an event", "kept_as", id, "reason", bad.Reason, "request_id", requestID(c))
	return c.JSON(http.StatusOK, map[string]string{"outcome": "malformed: " + bad.Reason})
}
