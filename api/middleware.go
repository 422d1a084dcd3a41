package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/problem"
)

var (
	httpRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "payments_http_requests_total",
		Help: "HTTP requests by method, route template and status.",
	}, []string{"method", "route", "status"})
	httpLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "payments_http_request_duration_seconds",
		Help:    "HTTP request latency by method, route template and whether the answer was an idempotent replay.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"method", "route", "replayed"})
	rateLimited = promauto.NewCounter(prometheus.CounterOpts{
		Name: "payments_rate_limited_total",
		Help: "Requests refused with 429 because their API key was over its rate (PAYMENTS_RATE_LIMIT).",
	})
)

// observe gives each request an id, then logs and counts it once it is answered.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if id == "" || len(id) > 64 {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			id = hex.EncodeToString(b)
		}
		c.Set(ctxRequestID, id)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		status := c.Response().Status
		replayed := c.Response().Header().Get("Idempotent-Replayed") == "true"
		httpRequests.WithLabelValues(c.Request().Method, route, strconv.Itoa(status)).Inc()
		httpLatency.WithLabelValues(c.Request().Method, route, strconv.FormatBool(replayed)).Observe(time.Since(start).Seconds())
		if !strings.HasPrefix(route, "/v1") {
			return nil // health checks and scrapes are not worth a log line each
		}
		attrs := []any{"request_id", id, "method", c.Request().Method, "route", route, "status", status,
			"duration_ms", float64(time.Since(start).Microseconds()) / 1000, "owner_id", c.Get(ctxOwner)}
		if op, ok := c.Get(ctxOperation).(loggedOperation); ok {
			attrs = append(attrs, "workflow_id", op.workflowID, op.key, op.id)
		}
		s.Log.InfoContext(c.Request().Context(), "request", attrs...)
		return nil
	}
}

// recoverPanic turns a panic in a handler into a 500 for that request alone, its stack logged.
func recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		return next(c)
	}
}

// authenticate resolves the bearer key to its owner and scopes; the key itself is never logged.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		header := c.Request().Header.Get(echo.HeaderAuthorization)
		scheme, key, ok := strings.Cut(header, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
			return problem.New(http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer <API key>")
		}
		k, err := auth.Authenticate(c.Request().Context(), s.DB, strings.TrimSpace(key))
		switch {
		case errors.Is(err, auth.ErrUnknownKey):
			return problem.New(http.StatusUnauthorized, "unauthorized", "the API key is not valid")
		case errors.Is(err, auth.ErrRevokedKey):
			return problem.New(http.StatusUnauthorized, "unauthorized", "the API key has been revoked")
		case err != nil:
			return err
		}
		c.Set(ctxOwner, k.OwnerID)
		c.Set(ctxKey, k)
		return next(c)
	}
}

// needs refuses a request whose key lacks scope with 403, before anything is looked up, so the
// answer says nothing about the resource asked for.
func needs(scope auth.Scope) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !c.Get(ctxKey).(auth.Key).Allows(scope) {
				return problem.New(http.StatusForbidden, "insufficient-scope", fmt.Sprintf(
					"this API key lacks the scope %q; issue one that has it (payments keys create --owner NAME --scope %s)", scope, scope))
			}
			return next(c)
		}
	}
}

// mayApprove lets through only a key with the payouts:approve scope (contract §9): anyone else
// is refused 403 approval-not-allowed, as the key that created the payout is (decidePayout).
func mayApprove(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !c.Get(ctxKey).(auth.Key).Allows(auth.ScopeApprove) {
			return problem.New(http.StatusForbidden, "approval-not-allowed", fmt.Sprintf(
				"this API key lacks the scope %q; a second key of the payout's owner that has it decides "+
					"(payments keys create --owner NAME --scope %s)", auth.ScopeApprove, auth.ScopeApprove))
		}
		return next(c)
	}
}

// limitRate refuses a request beyond its key's rate (ratelimit.go) with 429 and Retry-After,
// before its body is read: nothing of it is executed or stored.
func (s *Server) limitRate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if wait := s.Limits.Take(c.Get(ctxKey).(auth.Key).ID, time.Now()); wait > 0 {
			rateLimited.Inc()
			p := problem.New(http.StatusTooManyRequests, "rate-limited", fmt.Sprintf(
				"this API key sent more than %s requests a second; retry after the time Retry-After gives", s.Limits.Rate()))
			p.RetryAfter = int((wait + time.Second - 1) / time.Second)
			return p
		}
		return next(c)
	}
}

// limitBody reads the whole body (413 past MaxBodyBytes), so handlers can decode and fingerprint it.
func limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Body == nil || req.Method == http.MethodGet {
			return next(c)
		}
		if req.ContentLength > MaxBodyBytes {
			return problem.New(http.StatusRequestEntityTooLarge, "payload-too-large", "request bodies are limited to 64 KiB")
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes+1))
		if err != nil {
			return problem.Invalid("the request body could not be read")
		}
		if len(body) > MaxBodyBytes {
			return problem.New(http.StatusRequestEntityTooLarge, "payload-too-large", "request bodies are limited to 64 KiB")
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		c.Set(ctxBody, body)
		return next(c)
	}
}

// detach lets a request that has arrived whole run to its end if the client hangs up, so that its
// retry finds the one result; waits inside are bounded (PAYMENTS_SYNC_WAIT).
func detach(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		c.SetRequest(req.WithContext(context.WithoutCancel(req.Context())))
		return next(c)
	}
}
