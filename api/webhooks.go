package api

import (
	"errors"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
)

// createEndpoint registers a webhook endpoint (docs/contract.md §7; ledger.RegisterEndpoint),
// then starts its delivery workflow; if that fails, its first event or the recovery pass does.
func (s *Server) createEndpoint(c echo.Context) error {
	ctx := c.Request().Context()
	scope, err := idempotencyScope(c, idempotency.RouteEndpoints)
	if err != nil {
		return err
	}
	req, fp, err := request.DecodeEndpoint(body(c), ledger.EventTypes)
	if err != nil {
		return err
	}
	answer, replayed, id, err := s.Ledger.RegisterEndpoint(ctx, scope, fp, s.TTL, s.WebhookURLs,
		ledger.Endpoint{URL: req.URL, EventTypes: req.EventTypes}, endpointAnswer)
	if err != nil {
		return err
	}
	if err := s.Webhooks.Start(ctx, id); err != nil {
		s.Log.WarnContext(ctx, "starting a webhook delivery workflow failed; its first event will", "endpoint", id, "err", err)
	}
	return respond(c, answer, replayed)
}

func (s *Server) listEndpoints(c echo.Context) error {
	es, err := s.Ledger.Endpoints(c.Request().Context(), owner(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": es})
}

func (s *Server) deleteEndpoint(c echo.Context) error {
	if err := s.Webhooks.Delete(c.Request().Context(), owner(c), c.Param("id")); err != nil {
		return notFound(err, "webhook endpoint")
	}
	return c.NoContent(http.StatusNoContent)
}

// listEvents is the events feed: the caller's events, oldest first, after the event `after`.
func (s *Server) listEvents(c echo.Context) error {
	if err := queryParams(c, "after", "type", "limit"); err != nil {
		return err
	}
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	typ := c.QueryParam("type")
	if typ != "" && !slices.Contains(ledger.EventTypes, typ) {
		return problem.Invalid("type is not an event type", problem.FieldError{Field: "type", Message: "must be an event type"})
	}
	page, err := s.Ledger.Events(c.Request().Context(), owner(c), c.QueryParam("after"), typ, limit)
	if errors.Is(err, ledger.ErrBadEventCursor) {
		return problem.Invalid("after is not the id of one of your events", problem.FieldError{Field: "after", Message: "must be an event id from this feed"})
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}
