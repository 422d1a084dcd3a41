package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/schedules"
)

// createScheduledTransfer schedules transfers from the caller's account: once at start_at, or
// every interval from then, count times or until cancelled (docs/contract.md §9).
func (s *Server) createScheduledTransfer(c echo.Context) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, idempotency.RouteScheduledTransfers)
	if err != nil {
		return err
	}
	req, sch, fp, err := request.DecodeScheduledTransfer(body(c))
	if err != nil {
		return err
	}
	done, claimed, err := s.replayedOrClaimed(c, scope, fp)
	if done || err != nil {
		return err
	}
	// Only a new request is held to start_at: the same request sent again later, its answer
	// stored or its first attempt still claiming the schedule, is answered as the first is.
	if !claimed && sch.StartAt.Before(time.Now().Add(-request.StartAtSlack)) {
		return problem.Invalid("the request has invalid fields", problem.FieldError{Field: "start_at", Message: "must be now or later"})
	}
	from, to, err := s.between(c, req.FromAccountID, req.ToAccountID, req.Currency, "scheduled transfer")
	if err != nil {
		return err
	}
	answer, err := s.Schedules.Submit(ctx, schedules.Request{
		Scope: scope, Fingerprint: fp, From: from.ID, To: to.ID, AmountMinor: req.AmountMinor, Currency: req.Currency,
		StartAt: sch.StartAt, Interval: req.Interval, Every: sch.Every, Count: req.Count, Description: req.Description,
		Metadata: req.Metadata,
	})
	logOperation(c, answer.WorkflowID, operation.KindScheduled, answer.ID)
	return respondSubmitted(c, answer, err, func(st ledger.ScheduledTransfer) idempotency.Response {
		return scheduledResponse(http.StatusAccepted, st)
	})
}

// cancelScheduledTransfer cancels every occurrence of a scheduled transfer not yet started, for
// the owner of its source account (anyone else: 404). DELETE takes no Idempotency-Key (§3 asks
// it of POSTs): it is idempotent by itself, a cancelled one cancelled again is answered as it
// stands. One completed (its last occurrence started) is 422 scheduled-transfer-not-active.
func (s *Server) cancelScheduledTransfer(c echo.Context) error {
	st, err := s.Schedules.Cancel(c.Request().Context(), owner(c), c.Param("id"))
	if errors.Is(err, ledger.ErrScheduleEnded) {
		p := problem.New(http.StatusUnprocessableEntity, "scheduled-transfer-not-active",
			fmt.Sprintf("scheduled transfer %s is %s: all its %d occurrences have started", st.ID, st.Status, st.Occurrences))
		p.ScheduledTransferID, p.ScheduledTransferStatus = st.ID, string(st.Status)
		return p
	}
	if err != nil {
		return notFound(err, "scheduled transfer")
	}
	return c.JSON(http.StatusOK, st)
}

func (s *Server) getScheduledTransfer(c echo.Context) error {
	st, err := s.Ledger.ScheduledTransfer(c.Request().Context(), owner(c), c.Param("id"))
	if err != nil {
		return notFound(err, "scheduled transfer")
	}
	return c.JSON(http.StatusOK, st)
}

// listScheduledTransfers is GET /v1/scheduled-transfers: the scheduled transfers that touch the
// caller's accounts, newest first.
func (s *Server) listScheduledTransfers(c echo.Context) error {
	return listed(s, c, []string{"pending", "active", "completed", "cancelled"}, s.Ledger.ScheduledTransfers)
}
