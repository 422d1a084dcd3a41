// Package problem holds the RFC 9457 problem details every error of the API is written as.
package problem

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// ContentType is the media type of every error body.
const ContentType = "application/problem+json"

// FieldError names one invalid field of a request body.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an error as the API writes it. Type ends in /problems/<slug>; Status equals the
// HTTP status. TransferID and WorkflowID are set where the contract (docs/contract.md) asks for them.
type Problem struct {
	Type       string       `json:"type"`
	Title      string       `json:"title"`
	Status     int          `json:"status"`
	Detail     string       `json:"detail"`
	Errors     []FieldError `json:"errors,omitempty"`
	TransferID string       `json:"transfer_id,omitempty"`
	PayoutID   string       `json:"payout_id,omitempty"`
	RefundID   string       `json:"refund_id,omitempty"`
	WorkflowID string       `json:"workflow_id,omitempty"`
	// AuthorizationID names the authorization; AuthorizationStatus is where it stands when a
	// capture or void came too late (`status` is the HTTP status's).
	AuthorizationID     string `json:"authorization_id,omitempty"`
	AuthorizationStatus string `json:"authorization_status,omitempty"`
	// PayoutStatus is where a payout stands when an approval or a rejection came too late.
	PayoutStatus string `json:"payout_status,omitempty"`
	// ScheduledTransferID names the scheduled transfer; ScheduledTransferStatus is where it
	// stands when a cancellation came after its last occurrence had started.
	ScheduledTransferID     string `json:"scheduled_transfer_id,omitempty"`
	ScheduledTransferStatus string `json:"scheduled_transfer_status,omitempty"`

	// RetryAfter, in seconds, is sent as the Retry-After header when positive.
	RetryAfter int `json:"-"`
	// Cause is what went wrong underneath, for the log; the client never sees it.
	Cause error `json:"-"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }

func (p *Problem) Unwrap() error { return p.Cause }

// Slugs and titles of every problem the API answers with; openapi.yaml lists the same.
var titles = map[string]string{
	"invalid-request":               "The request is invalid",
	"unauthorized":                  "A valid API key is required",
	"insufficient-scope":            "The API key lacks the scope this request needs",
	"rate-limited":                  "Too many requests for this API key",
	"not-found":                     "Not found",
	"payload-too-large":             "The request body is too large",
	"missing-idempotency-key":       "Idempotency-Key is missing",
	"invalid-idempotency-key":       "Idempotency-Key is invalid",
	"idempotency-key-reused":        "Idempotency-Key was used with a different request",
	"idempotency-key-in-use":        "A request with this Idempotency-Key is still being processed",
	"currency-mismatch":             "The currency does not match the accounts",
	"insufficient-funds":            "Insufficient funds",
	"service-unavailable":           "The service is temporarily unavailable",
	"transfer-failed":               "The transfer failed",
	"refund-failed":                 "The refund failed",
	"refund-exceeds-transfer":       "The refund exceeds what remains of the transfer",
	"transfer-not-refundable":       "The transfer cannot be refunded",
	"too-many-webhook-endpoints":    "Too many webhook endpoints",
	"authorization-failed":          "The authorization failed",
	"authorization-not-pending":     "The authorization is no longer pending",
	"authorization-pending":         "The authorization's money is not held yet",
	"capture-exceeds-authorization": "The capture exceeds the authorized amount",
	"approval-not-allowed":          "This key may not decide on the payout",
	"payout-not-pending-approval":   "The payout is not pending approval",
	"payout-pending":                "The payout's money is not held yet",
	"scheduled-transfer-failed":     "The scheduled transfer failed",
	"scheduled-transfer-not-active": "The scheduled transfer is no longer active",
	"method-not-allowed":            "Method not allowed",
	"internal-error":                "Internal error",
}

// New returns the problem of slug with its fixed title.
func New(status int, slug, detail string) *Problem {
	title, ok := titles[slug]
	if !ok {
		panic("problem: unknown slug " + slug)
	}
	return &Problem{Type: "/problems/" + slug, Title: title, Status: status, Detail: detail}
}

// Slugs lists every slug, for the OpenAPI test.
func Slugs() []string {
	out := make([]string, 0, len(titles))
	for s := range titles {
		out = append(out, s)
	}
	return out
}

// Body is the problem as JSON.
func (p *Problem) Body() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // only strings and ints: cannot fail
	}
	return b
}

// Invalid is a 400 invalid-request listing field errors.
func Invalid(detail string, errs ...FieldError) *Problem {
	p := New(http.StatusBadRequest, "invalid-request", detail)
	p.Errors = errs
	return p
}

// NotFound is the answer for anything the caller may not see, existing or not.
func NotFound(what string) *Problem {
	return New(http.StatusNotFound, "not-found", what+" not found")
}

// KeyReused is the answer to an Idempotency-Key first sent with a different request.
func KeyReused() *Problem {
	return New(http.StatusUnprocessableEntity, "idempotency-key-reused",
		"this Idempotency-Key was first used with a different request; use a new key for a new operation")
}

// Unavailable is a 503 that asks the client to retry later with the same key. cause, which
// may be nil, is logged.
func Unavailable(detail string, cause error) *Problem {
	p := New(http.StatusServiceUnavailable, "service-unavailable", detail)
	p.RetryAfter = 1
	p.Cause = cause
	return p
}
