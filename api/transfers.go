package api

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/transfers"
)

var (
	replays = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "payments_idempotent_replays_total",
		Help: "Duplicate requests answered with the stored (or joined) result, by route.",
	}, []string{"route"})
	conflicts = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "payments_idempotency_conflicts_total",
		Help: "Idempotency conflicts by kind: reused (key sent with another request) or in_use (first still running).",
	}, []string{"route", "kind"})
	outcomes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "payments_transfers_total",
		Help: "Answers to new transfer submissions by outcome: completed, rejected, pending, failed.",
	}, []string{"outcome"})
)

// countConflict counts the answers of the idempotency contract that are not stored.
func countConflict(c echo.Context, p *problem.Problem) {
	switch p.Type {
	case "/problems/idempotency-key-reused":
		conflicts.WithLabelValues(c.Path(), "reused").Inc()
	case "/problems/idempotency-key-in-use":
		conflicts.WithLabelValues(c.Path(), "in_use").Inc()
	case "/problems/transfer-failed":
		outcomes.WithLabelValues(string(ledger.TransferFailed)).Inc()
	}
}

// replayed answers a duplicate of a finished request from its stored answer (one read), and
// refuses a key first used with another request; done is true when it answered.
func (s *Server) replayed(c echo.Context, scope idempotency.Scope, fingerprint []byte) (done bool, err error) {
	rec, found, err := idempotency.Lookup(c.Request().Context(), s.DB, scope)
	switch {
	case err != nil:
		return false, err
	case found && !bytes.Equal(rec.Fingerprint, fingerprint):
		return false, idempotency.ErrReused
	case found && rec.Response != nil:
		return true, respond(c, *rec.Response, true)
	}
	return false, nil
}

// idempotencyScope reads the Idempotency-Key of a POST under route.
func idempotencyScope(c echo.Context, route string) (idempotency.Scope, error) {
	key, err := idempotency.ParseKey(c.Request().Header.Values(idempotency.Header))
	switch {
	case errors.Is(err, idempotency.ErrMissing):
		return idempotency.Scope{}, problem.New(http.StatusBadRequest, "missing-idempotency-key", err.Error())
	case err != nil:
		return idempotency.Scope{}, problem.New(http.StatusBadRequest, "invalid-idempotency-key", err.Error())
	}
	return idempotency.Scope{OwnerID: owner(c), Route: route, Key: key}, nil
}

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

// submit submits r (a transfer or a refund) and names the posting and its workflow in the
// request's log line.
func (s *Server) submit(c echo.Context, r transfers.Request) (transfers.Answer, error) {
	answer, err := s.Transfers.Submit(c.Request().Context(), r)
	if answer.TransferID != "" {
		c.Set(ctxWorkflowID, r.Scope.WorkflowID())
		c.Set(ctxTransferID, answer.TransferID)
	}
	return answer, err
}

func outcomeOf(status int) ledger.TransferStatus {
	if status == http.StatusCreated {
		return ledger.TransferCompleted
	}
	return ledger.TransferRejected
}

func (s *Server) getTransfer(c echo.Context) error {
	t, err := s.Ledger.Transfer(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "transfer")
	}
	return c.JSON(http.StatusOK, t)
}
