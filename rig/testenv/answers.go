package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/payments/payments/internal/problem"
)

// Differ says whether two answers differ in what a replay keeps byte for byte: the status, the
// body, Location and Content-Type. It fails nothing, for callers in goroutines and for answers
// that may both be fresh.
func Differ(a, b Response) bool {
	return a.Status != b.Status || string(a.Body) != string(b.Body) ||
		a.Header.Get("Location") != b.Header.Get("Location") ||
		a.Header.Get("Content-Type") != b.Header.Get("Content-Type")
}

// SameAnswer fails t unless again replays first: the same answer byte for byte (Differ), and
// again says it is a replay (Idempotent-Replayed: true).
func SameAnswer(t testing.TB, first, again Response) {
	t.Helper()
	if Differ(first, again) {
		t.Fatalf("answers differ:\n%d %v %s\n%d %v %s", first.Status, first.Header, first.Body, again.Status, again.Header, again.Body)
	}
	if again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a replay without Idempotent-Replayed: %v", again.Header)
	}
}

// ProblemType is the slug of a problem answer: its type is /problems/<slug>. It fails t unless r
// is a problem (its Content-Type) with such a type.
func ProblemType(t testing.TB, r Response) string {
	t.Helper()
	if !strings.HasPrefix(r.Header.Get("Content-Type"), problem.ContentType) {
		t.Fatalf("not a problem: %d %s", r.Status, r.Body)
	}
	typ, _ := r.JSON(t)["type"].(string)
	slug, ok := strings.CutPrefix(typ, "/problems/")
	if !ok {
		t.Fatalf("a problem whose type is not /problems/<slug>: %d %s", r.Status, r.Body)
	}
	return slug
}

// ClassifyTransfer checks an answer to POST /v1/transfers, from one account to another of
// amount, against the contract (docs/contract.md): final is 201 (this transfer, completed, with
// its Location) or 422 insufficient-funds (with its transfer_id); not final, and to be sent
// again, is 503 service-unavailable or 409 idempotency-key-in-use with Retry-After, or 202
// pending with a Location. kind is the answer's problem type, or the transfer status its body
// reports; problem says what is wrong with an answer the contract does not allow, which counts
// as final (nobody retries after it).
func ClassifyTransfer(r Response, from, to string, amount int64) (kind string, final bool, problemText string) {
	if r.Status == 0 {
		return "", true, "no answer"
	}
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return "", true, "the body is not JSON"
	}
	isProblem := strings.HasPrefix(r.Header.Get("Content-Type"), problem.ContentType)
	status, _ := body["status"].(string)
	kind = status
	if isProblem {
		kind, _ = body["type"].(string)
		kind = strings.TrimPrefix(kind, "/problems/")
	}
	retryAfter := r.Header.Get("Retry-After") != ""
	switch {
	case r.Status == http.StatusCreated:
		if status != "completed" || isProblem || r.Header.Get("Location") != fmt.Sprint("/v1/transfers/", body["id"]) ||
			body["from_account_id"] != from || body["to_account_id"] != to || body["amount_minor"] != float64(amount) {
			return kind, true, "a 201 that is not this transfer, completed, with its Location"
		}
		return kind, true, ""
	case r.Status == http.StatusUnprocessableEntity:
		if kind != "insufficient-funds" || !isProblem || body["transfer_id"] == nil {
			return kind, true, "the only final 422 is insufficient-funds with its transfer_id"
		}
		return kind, true, ""
	case r.Status == http.StatusServiceUnavailable && kind == "service-unavailable" && isProblem && retryAfter,
		r.Status == http.StatusConflict && kind == "idempotency-key-in-use" && isProblem && retryAfter:
		return kind, false, ""
	case r.Status == http.StatusAccepted:
		if status != "pending" || isProblem || !strings.HasPrefix(r.Header.Get("Location"), "/v1/transfers/") {
			return kind, true, "a 202 that is not pending with a Location"
		}
		return kind, false, ""
	}
	return kind, true, "not an answer the contract allows here"
}
