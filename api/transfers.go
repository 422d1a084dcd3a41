package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

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

func countConflict(c echo.Context, p *problem.Problem) {
	switch p.Type {
	case "/problems/idempotency-key-reused":
		conflicts.WithLabelValues(c.Path(), "reused").Inc()
	case "/problems/idempotency-key-in-use":
		conflicts.WithLabelValues(c.Path(), "in_use").Inc()
	case "/problems/transfer-failed":
		outcomes.WithLabelValues("failed").Inc()
	}
}

type createTransferRequest struct {
	FromAccountID string          `json:"from_account_id"`
	ToAccountID   string          `json:"to_account_id"`
	AmountMinor   json.RawMessage `json:"amount_minor"`
	Currency      string          `json:"currency"`
	Description   string          `json:"description"`
}

// keyAndFingerprint reads the Idempotency-Key and fingerprints the body; a duplicate of a
// finished request is answered from here without further work.
func (s *Server) keyAndFingerprint(c echo.Context, route string) (idempotency.Scope, []byte, error) {
	key, err := idempotency.ParseKey(c.Request().Header.Values(idempotency.Header))
	switch {
	case errors.Is(err, idempotency.ErrMissing):
		return idempotency.Scope{}, nil, problem.New(http.StatusBadRequest, "missing-idempotency-key", err.Error())
	case err != nil:
		return idempotency.Scope{}, nil, problem.New(http.StatusBadRequest, "invalid-idempotency-key", err.Error())
	}
	fp, err := idempotency.Fingerprint(route, body(c))
	if err != nil {
		return idempotency.Scope{}, nil, problem.Invalid("the request body is not valid JSON: " + err.Error())
	}
	return idempotency.Scope{OwnerID: owner(c), Route: route, Key: key}, fp, nil
}

func (s *Server) createTransfer(c echo.Context) error {
	ctx := c.Request().Context()
	scope, fp, err := s.keyAndFingerprint(c, idempotency.RouteTransfers)
	if err != nil {
		return err
	}
	var req createTransferRequest
	if err := decode(body(c), &req); err != nil {
		return err
	}
	var f fields
	if req.FromAccountID == "" {
		f.add("from_account_id", "is required")
	}
	if req.ToAccountID == "" {
		f.add("to_account_id", "is required")
	}
	if req.FromAccountID != "" && req.FromAccountID == req.ToAccountID {
		f.add("to_account_id", "must differ from from_account_id")
	}
	amount := f.amount(req.AmountMinor)
	f.currency(req.Currency)
	f.text("description", req.Description, 140)
	if err := f.err(); err != nil {
		return err
	}

	// A duplicate of a finished transfer is answered from its stored response: one read.
	if rec, found, err := idempotency.Lookup(ctx, s.DB, scope); err != nil {
		return problem.Unavailable("the ledger database is unreachable; retry with the same Idempotency-Key", err)
	} else if found && !bytes.Equal(rec.Fingerprint, fp) {
		return problem.KeyReused()
	} else if found && rec.Response != nil {
		return respond(c, *rec.Response, true)
	}

	from, to, err := s.Ledger.Accounts(ctx, owner(c), req.FromAccountID, req.ToAccountID)
	if errors.Is(err, ledger.ErrNotFound) {
		return problem.NotFound("account")
	}
	if err != nil {
		return problem.Unavailable("the ledger database is unreachable; retry with the same Idempotency-Key", err)
	}
	if from.Currency != req.Currency || to.Currency != req.Currency {
		return problem.New(http.StatusUnprocessableEntity, "currency-mismatch",
			"the transfer is in "+req.Currency+" but the accounts hold "+from.Currency+" and "+to.Currency)
	}
	answer, err := s.Transfers.Submit(ctx, transfers.Request{
		Scope: scope, Fingerprint: fp, From: from.ID, To: to.ID,
		AmountMinor: amount, Currency: req.Currency, Description: req.Description,
	})
	if answer.TransferID != "" { // for the request log
		c.Set(ctxWorkflowID, scope.WorkflowID())
		c.Set(ctxTransferID, answer.TransferID)
	}
	if err != nil {
		return err
	}
	if !answer.Replayed {
		outcomes.WithLabelValues(outcomeOf(answer.Status)).Inc()
	}
	return respond(c, answer.Response, answer.Replayed)
}

func outcomeOf(status int) string {
	switch status {
	case http.StatusCreated:
		return "completed"
	case http.StatusAccepted:
		return "pending"
	default:
		return "rejected"
	}
}

func (s *Server) getTransfer(c echo.Context) error {
	t, err := s.Ledger.Transfer(c.Request().Context(), owner(c), c.Param("id"))
	if errors.Is(err, ledger.ErrNotFound) {
		return problem.NotFound("transfer")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}
