// Package api serves the HTTP API: authentication, request validation, idempotency at the edge,
// and problem+json errors. Transfers are submitted through package transfers.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"

	payments "github.com/payments/payments"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/transfers"
)

// MaxBodyBytes bounds a request body (64 KiB, spec §2).
const MaxBodyBytes = 64 << 10

// Server holds the API's dependencies.
type Server struct {
	DB        *pgxpool.Pool
	Ledger    *ledger.Ledger
	Transfers *transfers.Service
	Temporal  client.Client
	TTL       time.Duration // how long stored responses are replayed
	Log       *slog.Logger
}

// Handler returns the Echo instance serving every route.
func (s *Server) Handler() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.writeError
	e.Use(s.observe)

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.ready)
	e.GET("/metrics", echo.WrapHandler(promhttp.Handler()))
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", payments.OpenAPI) })

	v1 := e.Group("/v1", detach, s.authenticate, limitBody)
	v1.POST("/accounts", s.createAccount)
	v1.GET("/accounts", s.listAccounts)
	v1.GET("/accounts/:id", s.getAccount)
	v1.GET("/accounts/:id/entries", s.listEntries)
	v1.POST("/transfers", s.createTransfer)
	v1.GET("/transfers/:id", s.getTransfer)
	return e
}

func (s *Server) ready(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"postgres": "ok", "temporal": "ok"}
	ok := true
	if err := s.DB.Ping(ctx); err != nil {
		checks["postgres"], ok = err.Error(), false
	}
	if _, err := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		checks["temporal"], ok = err.Error(), false
	}
	if !ok {
		return problem.Unavailable("not ready: postgres "+checks["postgres"]+"; temporal "+checks["temporal"], nil)
	}
	return c.JSON(http.StatusOK, checks)
}

// writeError answers every error as problem+json.
func (s *Server) writeError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var p *problem.Problem
	var he *echo.HTTPError
	switch {
	case errors.As(err, &p):
	case errors.As(err, &he):
		p = fromHTTPError(he)
	default:
		s.Log.ErrorContext(c.Request().Context(), "request failed", "err", err, "request_id", requestID(c))
		p = problem.New(http.StatusInternalServerError, "internal-error", "an unexpected error occurred; it has been logged")
	}
	if p.Cause != nil {
		s.Log.WarnContext(c.Request().Context(), "answered "+strconv.Itoa(p.Status), "err", p.Cause, "request_id", requestID(c))
	}
	countConflict(c, p)
	if p.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="payments"`)
	}
	if p.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	_ = c.Blob(p.Status, problem.ContentType, p.Body())
}

// fromHTTPError maps the errors Echo's router raises itself; handlers return problems.
func fromHTTPError(he *echo.HTTPError) *problem.Problem {
	switch he.Code {
	case http.StatusNotFound:
		return problem.NotFound("route")
	case http.StatusMethodNotAllowed:
		return problem.New(he.Code, "method-not-allowed", "this route does not take that method")
	default:
		return problem.New(http.StatusInternalServerError, "internal-error", "an unexpected error occurred")
	}
}
