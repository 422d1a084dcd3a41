package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/transfers"
)

// What the handlers share: what a request carries, its Idempotency-Key, its answers, its query,
// and the lookups that answer 404.

const (
	ctxOwner     = "owner_id"
	ctxKey       = "api_key" // the auth.Key the request authenticated with
	ctxBody      = "body"
	ctxRequestID = "request_id"
	// The operation a request submitted, for its log line (logOperation).
	ctxOperation = "operation"
)

// loggedOperation is the operation a request submitted: its workflow, and its id under the name
// of its kind ("transfer_id", "refund_id", "payout_id").
type loggedOperation struct{ workflowID, key, id string }

// logOperation names the operation a request submitted in its log line, once it has an id.
func logOperation(c echo.Context, workflowID string, kind operation.Kind, id string) {
	if id != "" {
		c.Set(ctxOperation, loggedOperation{workflowID, string(kind) + "_id", id})
	}
}

func owner(c echo.Context) string { return c.Get(ctxOwner).(string) }

func body(c echo.Context) []byte {
	b, _ := c.Get(ctxBody).([]byte)
	return b
}

func requestID(c echo.Context) string {
	id, _ := c.Get(ctxRequestID).(string)
	return id
}

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

func outcomeOf(status int) ledger.TransferStatus {
	if status == http.StatusCreated {
		return ledger.TransferCompleted
	}
	return ledger.TransferRejected
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

// replayed answers a duplicate of a finished request from its stored answer (one read), and
// refuses a key first used with another request; done is true when it answered.
func (s *Server) replayed(c echo.Context, scope idempotency.Scope, fingerprint []byte) (done bool, err error) {
	done, _, err = s.replayedOrClaimed(c, scope, fingerprint)
	return done, err
}

// replayedOrClaimed is replayed that also tells whether the key is claimed by this request
// already (its answer not yet stored): a check that only a new request is held to (a start_at
// that must still be ahead) is skipped for a claimed one, which is answered as its run answers.
func (s *Server) replayedOrClaimed(c echo.Context, scope idempotency.Scope, fingerprint []byte) (done, claimed bool, err error) {
	rec, found, err := idempotency.Lookup(c.Request().Context(), s.DB, scope)
	switch {
	case err != nil:
		return false, false, err
	case found && !bytes.Equal(rec.Fingerprint, fingerprint):
		return false, false, idempotency.ErrReused
	case found && rec.Response != nil:
		return true, true, respond(c, *rec.Response, true)
	}
	return false, found, nil
}

// submit submits r (a transfer or a refund) and names the posting and its workflow in the
// request's log line.
func (s *Server) submit(c echo.Context, r transfers.Request) (transfers.Answer, error) {
	answer, err := s.Transfers.Submit(c.Request().Context(), r)
	kind := operation.KindTransfer
	if r.RefundOf != "" {
		kind = operation.KindRefund
	}
	logOperation(c, answer.WorkflowID, kind, answer.ID)
	return answer, err
}

// respondSubmitted answers a submission: with its error, with the operation as it stands when it
// is still running (a 202 that pending makes, not stored), or with its answer as stored.
func respondSubmitted[P any](c echo.Context, answer operation.Answer[P], err error, pending func(P) idempotency.Response) error {
	if err != nil {
		return err
	}
	if answer.Pending != nil {
		return respond(c, pending(*answer.Pending), false)
	}
	return respond(c, answer.Response, answer.Replayed)
}

// respond writes a stored or fresh answer exactly as it is stored.
func respond(c echo.Context, r idempotency.Response, replayed bool) error {
	h := c.Response().Header()
	if r.Location != "" {
		h.Set(echo.HeaderLocation, r.Location)
	}
	if replayed {
		h.Set("Idempotent-Replayed", "true")
		replays.WithLabelValues(c.Path()).Inc()
	}
	return c.Blob(r.Status, r.ContentType, r.Body)
}

// jsonAnswer is an answer with v as its JSON body, naming the resource at location.
func jsonAnswer(status int, location string, v any) idempotency.Response {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err) // the ledger's types: strings, integers and times, cannot fail
	}
	return idempotency.Response{Status: status, ContentType: "application/json", Location: location, Body: body}
}

// notFound turns a lookup's "no such object" into 404 not-found for what; an identifier that
// PostgreSQL cannot even compare (a NUL in it) names no object either. Other errors pass.
func notFound(err error, what string) error {
	if errors.Is(err, ledger.ErrNotFound) || database.BadInput(err) {
		return problem.NotFound(what)
	}
	return err
}

// listError answers a cursor a list did not make as 400; other errors as they are.
func listError(err error) error {
	if errors.Is(err, ledger.ErrBadCursor) {
		return problem.Invalid("cursor is not one this API returned", problem.FieldError{Field: "cursor", Message: "invalid"})
	}
	return err
}

// queryParams refuses a query (400 invalid-request) that does not parse, or has a parameter
// other than names, or one of them more than once: a list that ignored a misspelled filter (or
// one in a pair that does not parse, which url.Values drops) would answer with more than was
// asked for, and one that picked among repeated values would guess. An empty value is the
// parameter left out.
func queryParams(c echo.Context, names ...string) error {
	query, err := url.ParseQuery(c.Request().URL.RawQuery)
	if err != nil {
		return problem.Invalid("the query does not parse: "+err.Error(), problem.FieldError{Field: "query", Message: "must be name=value pairs joined by &, percent-encoded"})
	}
	var fields []problem.FieldError
	for name, values := range query {
		switch {
		case !slices.Contains(names, name):
			fields = append(fields, problem.FieldError{Field: name, Message: "is not a parameter here; the parameters are " + strings.Join(names, ", ")})
		case len(values) > 1:
			fields = append(fields, problem.FieldError{Field: name, Message: "is given more than once"})
		}
	}
	if len(fields) == 0 {
		return nil
	}
	slices.SortFunc(fields, func(a, b problem.FieldError) int { return strings.Compare(a.Field, b.Field) })
	return problem.Invalid("the query has parameters this route does not take", fields...)
}

// limitParam is a list's page size: the query's limit, 1 to 200, or 50.
func limitParam(c echo.Context) (int, error) {
	v := c.QueryParam("limit")
	if v == "" {
		return 50, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 200 {
		return 0, problem.Invalid("limit must be an integer from 1 to 200", problem.FieldError{Field: "limit", Message: "must be 1 to 200"})
	}
	return n, nil
}

// listParams are the query parameters of the lists of transfers and payouts.
var listParams = []string{"account_id", "status", "created_after", "created_before", "limit", "cursor"}

// listFilter reads a list's query: account_id (one of the caller's accounts, else 404),
// status (one of statuses), created_after and created_before (RFC 3339), limit and cursor, and
// those of extra: scheduled_transfer_id (one the caller sees, else 404).
func (s *Server) listFilter(c echo.Context, statuses []string, extra ...string) (ledger.Filter, error) {
	var f ledger.Filter
	if err := queryParams(c, slices.Concat(listParams, extra)...); err != nil {
		return f, err
	}
	var err error
	if f.Limit, err = limitParam(c); err != nil {
		return f, err
	}
	f.Cursor, f.AccountID, f.Status = c.QueryParam("cursor"), c.QueryParam("account_id"), c.QueryParam("status")
	var fields []problem.FieldError
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		fields = append(fields, problem.FieldError{Field: "status", Message: "must be one of " + strings.Join(statuses, ", ")})
	}
	for _, b := range []struct {
		name string
		dst  **time.Time
	}{{"created_after", &f.CreatedAfter}, {"created_before", &f.CreatedBefore}} {
		if v := c.QueryParam(b.name); v != "" {
			at, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				fields = append(fields, problem.FieldError{Field: b.name, Message: "must be an RFC 3339 time, e.g. 2026-12-01T10:00:00Z"})
			}
			*b.dst = &at // the year 1 too: a bound, not "no bound"
		}
	}
	if len(fields) > 0 {
		return f, problem.Invalid("the list's query has invalid parameters", fields...)
	}
	if f.AccountID != "" {
		if _, err := s.Ledger.Account(c.Request().Context(), owner(c), f.AccountID); err != nil {
			return f, notFound(err, "account")
		}
	}
	if f.ScheduledTransferID = c.QueryParam("scheduled_transfer_id"); f.ScheduledTransferID != "" && slices.Contains(extra, "scheduled_transfer_id") {
		if _, err := s.Ledger.ScheduledTransfer(c.Request().Context(), owner(c), f.ScheduledTransferID); err != nil {
			return f, notFound(err, "scheduled transfer")
		}
	}
	return f, nil
}
