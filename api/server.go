// Package api serves the HTTP API: authentication, request validation, idempotency at the edge,
// and problem+json errors. Transfers are submitted through package transfers.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"

	payments "github.com/payments/payments"
	"github.com/payments/payments/authorizations"
	"github.com/payments/payments/deliveries"
	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/internal/webhook"
	"github.com/payments/payments/payins"
	"github.com/payments/payments/payouts"
	"github.com/payments/payments/schedules"
	"github.com/payments/payments/transfers"
)

// MaxBodyBytes bounds a request body (64 KiB, docs/contract.md §2).
const MaxBodyBytes = 64 << 10

// Server holds the API's dependencies.
type Server struct {
	DB             *pgxpool.Pool
	Ledger         *ledger.Ledger
	Transfers      *transfers.Service
	Payouts        *payouts.Service
	Payins         *payins.Service
	Authorizations *authorizations.Service
	Schedules      *schedules.Service
	Webhooks       *deliveries.Service
	// WebhookURLs decides which URLs an endpoint may have (PAYMENTS_WEBHOOK_ALLOW_INSECURE).
	WebhookURLs webhook.Policy
	Temporal    client.Client
	BankSecret  []byte        // verifies the bank's callbacks (PAYMENTS_BANK_SECRET)
	TTL         time.Duration // how long stored responses are replayed
	Limits      *RateLimits   // PAYMENTS_RATE_LIMIT per key; nil limits nothing
	Log         *slog.Logger
}

// NewHTTPServer returns the HTTP server for handler on addr, with the timeouts that keep slow or
// idle clients from holding connections: a request must arrive whole within ReadTimeout (a
// client trickling its headers or body is cut off), an answer may take PAYMENTS_SYNC_WAIT and
// some, and an idle keep-alive connection is closed after IdleTimeout.
func NewHTTPServer(addr string, handler http.Handler, syncWait time.Duration) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      syncWait + 30*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// Handler returns the Echo instance serving every route.
func (s *Server) Handler() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.writeError
	e.Use(s.observe, recoverPanic)

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.ready)
	e.GET("/metrics", echo.WrapHandler(promhttp.Handler()))
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", payments.OpenAPI) })

	// The bank signs its callbacks; it has no API key.
	e.POST("/v1/bank/events", s.bankEvent, detach, limitBody)

	// Each route needs a scope of the key (contract §10): every read needs read, each kind of
	// write its own, checked before the body is read or anything looked up. A key over its rate
	// is refused before that.
	v1 := e.Group("/v1", detach, s.authenticate, s.limitRate)
	read, transfers, payouts := scoped(auth.ScopeRead), scoped(auth.ScopeTransfers), scoped(auth.ScopePayouts)
	accounts, webhooks := scoped(auth.ScopeAccounts), scoped(auth.ScopeWebhooks)
	v1.POST("/accounts", s.createAccount, accounts...)
	v1.GET("/accounts", s.listAccounts, read...)
	v1.GET("/accounts/:id", s.getAccount, read...)
	v1.GET("/accounts/:id/entries", s.listEntries, read...)
	v1.POST("/transfers", s.createTransfer, transfers...)
	v1.GET("/transfers", s.listTransfers, read...)
	v1.GET("/transfers/:id", s.getTransfer, read...)
	v1.POST("/transfers/:id/refunds", s.createRefund, transfers...)
	v1.GET("/refunds/:id", s.getRefund, read...)
	v1.POST("/payouts", s.createPayout, payouts...)
	v1.GET("/payouts", s.listPayouts, read...)
	v1.GET("/payouts/:id", s.getPayout, read...)
	v1.POST("/payouts/:id/approve", s.approvePayout, mayApprove, limitBody)
	v1.POST("/payouts/:id/reject", s.rejectPayout, mayApprove, limitBody)
	v1.POST("/authorizations", s.createAuthorization, transfers...)
	v1.GET("/authorizations", s.listAuthorizations, read...)
	v1.GET("/authorizations/:id", s.getAuthorization, read...)
	v1.POST("/authorizations/:id/capture", s.captureAuthorization, transfers...)
	v1.POST("/authorizations/:id/void", s.voidAuthorization, transfers...)
	v1.POST("/scheduled-transfers", s.createScheduledTransfer, transfers...)
	v1.GET("/scheduled-transfers", s.listScheduledTransfers, read...)
	v1.GET("/scheduled-transfers/:id", s.getScheduledTransfer, read...)
	v1.DELETE("/scheduled-transfers/:id", s.cancelScheduledTransfer, transfers...)
	v1.GET("/events", s.listEvents, read...)
	v1.POST("/webhook-endpoints", s.createEndpoint, webhooks...)
	v1.GET("/webhook-endpoints", s.listEndpoints, read...)
	v1.DELETE("/webhook-endpoints/:id", s.deleteEndpoint, webhooks...)
	return e
}

// scoped is what a /v1 route runs before its handler: its scope's check, then the body read
// whole (limitBody).
func scoped(scope auth.Scope) []echo.MiddlewareFunc {
	return []echo.MiddlewareFunc{needs(scope), limitBody}
}

// ready answers whether PostgreSQL and Temporal answer. It needs no key, so its body says only
// which dependency is down; the driver's error (hosts, ports, names) goes to the log.
func (s *Server) ready(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"postgres": "ok", "temporal": "ok"}
	var down []string
	var causes []error
	if err := s.DB.Ping(ctx); err != nil {
		checks["postgres"], down, causes = "unreachable", append(down, "PostgreSQL"), append(causes, err)
	}
	if _, err := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		checks["temporal"], down, causes = "unreachable", append(down, "Temporal"), append(causes, err)
	}
	if len(down) > 0 {
		return problem.Unavailable("not ready: "+strings.Join(down, " and ")+" unreachable", errors.Join(causes...))
	}
	return c.JSON(http.StatusOK, checks)
}

// writeError answers every error as problem+json (problemFor decides which), logging the cause
// of each 5xx.
func (s *Server) writeError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	p := problemFor(err)
	switch {
	case p.Status == http.StatusInternalServerError && p.Cause != nil:
		s.Log.ErrorContext(c.Request().Context(), "request failed", "err", p.Cause, "request_id", requestID(c))
	case p.Cause != nil:
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
