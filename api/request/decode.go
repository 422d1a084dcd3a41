// Package request reads the API's request bodies: strictly, once, into the one value that the
// handler executes and that the Idempotency-Key's fingerprint covers. Every refusal is a 400
// invalid-request problem naming the field.
package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/internal/strictjson"
)

// decode reads body into dst, a pointer to a request struct, strictly (strictjson.Decode): one
// JSON object in UTF-8, each member name exactly one of dst's fields (names are case-sensitive:
// "AMOUNT_MINOR" is not "amount_minor"), no name given twice in any object, and each value of
// its field's type. That leaves exactly one reading of the body, which is the one the handler
// executes and the one fingerprinted. A refusal is a 400 naming the field.
func decode(body []byte, dst any) error {
	err := strictjson.Decode(body, dst, strictjson.Options{})
	var e *strictjson.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case strictjson.NotObject:
		return problem.Invalid("the request body must be a JSON object")
	case strictjson.NotUTF8:
		return problem.Invalid("the request body must be UTF-8")
	case strictjson.Trailing:
		return problem.Invalid("the request body must hold exactly one JSON object")
	case strictjson.Duplicate:
		return problem.Invalid("the request gives a field more than once",
			problem.FieldError{Field: e.Field, Message: "given more than once"})
	case strictjson.Unknown, strictjson.CaseVariant:
		msg := "unknown field"
		if e.Known != "" {
			msg = fmt.Sprintf("unknown field; names are case-sensitive: %q", e.Known)
		}
		return problem.Invalid("the request has a field this API does not know", problem.FieldError{Field: e.Field, Message: msg})
	case strictjson.WrongType:
		if e.Message != "" {
			return problem.Invalid("a field has the wrong type", problem.FieldError{Field: e.Field, Message: e.Message})
		}
		return typeError(e.Err)
	}
	return syntaxError(e.Err)
}

func syntaxError(err error) error {
	return problem.Invalid("the request body is not valid JSON: " + err.Error())
}

// typeError explains a value of the wrong type.
func typeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) || typeErr.Field == "" {
		return syntaxError(err)
	}
	msg := "must be a JSON " + jsonType(typeErr.Type.Kind())
	switch typeErr.Type.Kind() {
	case reflect.Int64:
		msg = "must be a JSON integer count of minor units"
	case reflect.Int:
		msg = "must be a JSON integer"
	}
	return problem.Invalid("a field has the wrong type", problem.FieldError{Field: typeErr.Field, Message: msg})
}

func jsonType(kind reflect.Kind) string {
	switch kind {
	case reflect.String:
		return "string"
	case reflect.Map, reflect.Struct:
		return "object"
	default:
		return "value of the documented type"
	}
}

// fields collects field errors.
type fields []problem.FieldError

func (f *fields) add(field, format string, args ...any) {
	*f = append(*f, problem.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (f fields) err() error {
	if len(f) == 0 {
		return nil
	}
	return problem.Invalid("the request has invalid fields", f...)
}

// amount checks an amount_minor that decoded as a JSON integer.
func (f *fields) amount(n int64) {
	if n == 0 {
		f.add("amount_minor", "is required: a positive integer count of minor units")
		return
	}
	if err := money.CheckAmount(n); err != nil {
		f.add("amount_minor", "%v", err)
	}
}

func (f *fields) currency(code string) {
	switch {
	case code == "":
		f.add("currency", "is required")
	case !money.ValidCurrency(code):
		f.add("currency", "must be one of %s", strings.Join(money.Currencies, ", "))
	}
}

// text checks free text: at most max characters, and no NUL, which PostgreSQL cannot store.
func (f *fields) text(field, value string, max int) {
	switch {
	case utf8.RuneCountInString(value) > max:
		f.add(field, "must be at most %d characters", max)
	case strings.ContainsRune(value, 0):
		f.add(field, "must not contain the NUL character")
	}
}

// Limits of metadata (docs/contract.md §8).
const (
	MaxMetadataKeys  = 20
	MaxMetadataKey   = 40
	MaxMetadataValue = 500
)

// metadata checks a metadata map: at most MaxMetadataKeys keys, each of 1 to MaxMetadataKey
// characters, each value at most MaxMetadataValue, none holding NUL. Errors are listed in key
// order, so that one request always gets one answer. An empty map is none: {} and no metadata
// are the same request.
func (f *fields) metadata(mp *map[string]string) {
	m := *mp
	if len(m) == 0 {
		*mp = nil
		return
	}
	if len(m) > MaxMetadataKeys {
		f.add("metadata", "must have at most %d keys, not %d", MaxMetadataKeys, len(m))
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		field := "metadata." + k
		switch {
		case k == "":
			f.add("metadata", "keys must not be empty")
		case utf8.RuneCountInString(k) > MaxMetadataKey:
			f.add(field, "key must be at most %d characters", MaxMetadataKey)
		case strings.ContainsRune(k, 0):
			f.add(field, "key must not contain the NUL character")
		}
		f.text(field, m[k], MaxMetadataValue)
	}
}

// id checks a required identifier.
func (f *fields) id(field, value string) {
	if value == "" {
		f.add(field, "is required")
	}
}

// Transfer is a POST /v1/transfers body, decoded once: the handler executes it and its
// fingerprint is taken from it. Optional fields are omitempty, so that leaving one out and
// sending it empty are the same request.
type Transfer struct {
	FromAccountID string `json:"from_account_id"`
	ToAccountID   string `json:"to_account_id"`
	AmountMinor   int64  `json:"amount_minor"`
	Currency      string `json:"currency"`
	Description   string `json:"description,omitempty"`
	// Metadata is omitempty too, so that the fingerprints of requests made before metadata
	// existed are those of the same requests now.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// DecodeTransfer decodes and validates a transfer request and returns its fingerprint.
func DecodeTransfer(body []byte) (Transfer, []byte, error) {
	var req Transfer
	if err := decode(body, &req); err != nil {
		return req, nil, err
	}
	var f fields
	f.between(req.FromAccountID, req.ToAccountID, req.AmountMinor, req.Currency)
	f.text("description", req.Description, 140)
	f.metadata(&req.Metadata)
	return fingerprinted(req, f, idempotency.RouteTransfers)
}

// between checks the accounts, amount and currency of money moved from one account to another.
func (f *fields) between(from, to string, amount int64, currency string) {
	f.id("from_account_id", from)
	f.id("to_account_id", to)
	if from != "" && from == to {
		f.add("to_account_id", "must differ from from_account_id")
	}
	f.amount(amount)
	f.currency(currency)
}

// Authorization is a POST /v1/authorizations body, decoded once: executed and fingerprinted.
// ExpiresIn is as given (its absence, the default, is another request than "168h").
type Authorization struct {
	FromAccountID string            `json:"from_account_id"`
	ToAccountID   string            `json:"to_account_id"`
	AmountMinor   int64             `json:"amount_minor"`
	Currency      string            `json:"currency"`
	ExpiresIn     string            `json:"expires_in,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// How long an authorization may hold its money (docs/contract.md §9).
const (
	DefaultExpiresIn = 7 * 24 * time.Hour
	MinExpiresIn     = time.Second
	MaxExpiresIn     = 30 * 24 * time.Hour
)

// DecodeAuthorization decodes and validates an authorization request and returns how long it
// holds its money, and its fingerprint.
func DecodeAuthorization(body []byte) (Authorization, time.Duration, []byte, error) {
	var req Authorization
	if err := decode(body, &req); err != nil {
		return req, 0, nil, err
	}
	var f fields
	f.between(req.FromAccountID, req.ToAccountID, req.AmountMinor, req.Currency)
	expiresIn := DefaultExpiresIn
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		switch {
		case err != nil:
			f.add("expires_in", `must be a duration such as "90s" or "72h"`)
		case d < MinExpiresIn || d > MaxExpiresIn:
			f.add("expires_in", "must be at least 1s and at most 720h (30 days)")
		}
		expiresIn = d
	}
	f.text("description", req.Description, 140)
	f.metadata(&req.Metadata)
	req, fp, err := fingerprinted(req, f, idempotency.RouteAuthorizations)
	return req, expiresIn, fp, err
}

// ScheduledTransfer is a POST /v1/scheduled-transfers body, decoded once: executed and
// fingerprinted. StartAt is the time given, in UTC (one instant written two ways is one
// request); Interval and Count are as given (absent: once; an interval without a count: until
// cancelled).
type ScheduledTransfer struct {
	FromAccountID string            `json:"from_account_id"`
	ToAccountID   string            `json:"to_account_id"`
	AmountMinor   int64             `json:"amount_minor"`
	Currency      string            `json:"currency"`
	StartAt       string            `json:"start_at"`
	Interval      string            `json:"interval,omitempty"`
	Count         *int              `json:"count,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// Schedule is when a scheduled transfer's occurrences are due, as its request says.
type Schedule struct {
	StartAt time.Time
	Every   time.Duration // 0: once
}

// Limits of a schedule (docs/contract.md §9).
const (
	MinInterval = time.Second
	MaxInterval = 10 * 366 * 24 * time.Hour
	MaxCount    = 1_000_000
	// StartAtSlack is how far in the past start_at may be and still be "now": the time a
	// request takes to arrive, and the client's clock.
	StartAtSlack = time.Minute
)

// DecodeScheduledTransfer decodes and validates a scheduled transfer request and returns its
// schedule and its fingerprint. That start_at is now or later is the handler's to check, once
// it knows the request is not a replay: a retry of the same request later is the same request.
func DecodeScheduledTransfer(body []byte) (ScheduledTransfer, Schedule, []byte, error) {
	var req ScheduledTransfer
	var sch Schedule
	if err := decode(body, &req); err != nil {
		return req, sch, nil, err
	}
	var f fields
	f.between(req.FromAccountID, req.ToAccountID, req.AmountMinor, req.Currency)
	if req.StartAt == "" {
		f.add("start_at", "is required: an RFC 3339 time, now or later")
	} else if at, err := time.Parse(time.RFC3339Nano, req.StartAt); err != nil {
		f.add("start_at", "must be an RFC 3339 time such as 2026-12-01T10:00:00Z")
	} else {
		sch.StartAt = at.UTC()
		req.StartAt = sch.StartAt.Format(time.RFC3339Nano)
	}
	if req.Interval != "" {
		d, err := time.ParseDuration(req.Interval)
		switch {
		case err != nil:
			f.add("interval", `must be a duration such as "90s", "24h" or "168h"`)
		case d < MinInterval || d > MaxInterval:
			f.add("interval", "must be at least 1s and at most 87840h (ten years)")
		case d%time.Millisecond != 0:
			f.add("interval", "must be a whole number of milliseconds")
		}
		sch.Every = d
	}
	if req.Count != nil {
		switch n := *req.Count; {
		case n < 1 || n > MaxCount:
			f.add("count", "must be from 1 to %d", MaxCount)
		case n > 1 && req.Interval == "":
			f.add("count", "more than one occurrence needs an interval")
		}
	}
	f.text("description", req.Description, 140)
	f.metadata(&req.Metadata)
	req, fp, err := fingerprinted(req, f, idempotency.RouteScheduledTransfers)
	return req, sch, fp, err
}

// Decision is a capture's or a void's request, decoded once: executed and fingerprinted with the
// authorization it decides on (the route's scope is the same for every authorization).
type Decision struct {
	AuthorizationID string `json:"authorization_id"` // from the path, not the body
	// AmountMinor is what a capture takes; nil (left out) takes all that was authorized.
	AmountMinor *int64 `json:"amount_minor,omitempty"`
}

// DecodeCapture decodes and validates a capture of authorizationID: a JSON object with an
// optional amount_minor, or no body at all (capture all).
func DecodeCapture(authorizationID string, body []byte) (Decision, []byte, error) {
	var b struct {
		AmountMinor *int64 `json:"amount_minor,omitempty"`
	}
	if err := decodeOptional(body, &b); err != nil {
		return Decision{}, nil, err
	}
	var f fields
	if b.AmountMinor != nil {
		if *b.AmountMinor == 0 {
			f.add("amount_minor", "must be a positive integer count of minor units, or left out to capture all")
		} else {
			f.amount(*b.AmountMinor)
		}
	}
	return fingerprinted(Decision{AuthorizationID: authorizationID, AmountMinor: b.AmountMinor}, f, idempotency.RouteCapture)
}

// DecodeVoid decodes a void of authorizationID: an empty JSON object, or no body at all.
func DecodeVoid(authorizationID string, body []byte) (Decision, []byte, error) {
	if err := decodeOptional(body, &struct{}{}); err != nil {
		return Decision{}, nil, err
	}
	return fingerprinted(Decision{AuthorizationID: authorizationID}, nil, idempotency.RouteVoid)
}

// Approval is an approval's or a rejection's request, decoded once: executed and fingerprinted
// with the payout it decides on.
type Approval struct {
	PayoutID string `json:"payout_id"` // from the path, not the body
	Reason   string `json:"reason,omitempty"`
}

// DecodeApproval decodes and validates an approval or a rejection (route says which) of
// payoutID: a JSON object with an optional reason, or no body at all.
func DecodeApproval(route, payoutID string, body []byte) (Approval, []byte, error) {
	var b struct {
		Reason string `json:"reason,omitempty"`
	}
	if err := decodeOptional(body, &b); err != nil {
		return Approval{}, nil, err
	}
	var f fields
	f.text("reason", b.Reason, 500)
	return fingerprinted(Approval{PayoutID: payoutID, Reason: b.Reason}, f, route)
}

// decodeOptional is decode, for a body that may be left out (empty, or only whitespace): then
// dst keeps its zero value.
func decodeOptional(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decode(body, dst)
}

// Account is a POST /v1/accounts body, decoded once: executed and fingerprinted.
type Account struct {
	Currency string            `json:"currency"`
	Name     string            `json:"name,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// DecodeAccount decodes and validates an account request and returns its fingerprint.
func DecodeAccount(body []byte) (Account, []byte, error) {
	var req Account
	if err := decode(body, &req); err != nil {
		return req, nil, err
	}
	var f fields
	f.currency(req.Currency)
	f.text("name", req.Name, 100)
	f.metadata(&req.Metadata)
	return fingerprinted(req, f, idempotency.RouteAccounts)
}

// fingerprinted returns req with its fingerprint on route, or the field errors found in it.
func fingerprinted[R any](req R, f fields, route string) (R, []byte, error) {
	if err := f.err(); err != nil {
		return req, nil, err
	}
	fp, err := idempotency.Fingerprint(route, req)
	return req, fp, err
}

// Payout is a POST /v1/payouts body, decoded once: executed and fingerprinted.
type Payout struct {
	AccountID   string            `json:"account_id"`
	AmountMinor int64             `json:"amount_minor"`
	Currency    string            `json:"currency"`
	Destination Destination       `json:"destination"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// Destination is where a payout's money goes: an account number at a bank.
type Destination struct {
	AccountNumber string `json:"account_number"`
	BankCode      string `json:"bank_code"`
}

// DecodePayout decodes and validates a payout request and returns its fingerprint.
func DecodePayout(body []byte) (Payout, []byte, error) {
	var req Payout
	if err := decode(body, &req); err != nil {
		return req, nil, err
	}
	var f fields
	f.id("account_id", req.AccountID)
	f.amount(req.AmountMinor)
	f.currency(req.Currency)
	f.pattern("destination.account_number", req.Destination.AccountNumber, accountNumber, "must be 6 to 34 digits")
	f.pattern("destination.bank_code", req.Destination.BankCode, bankCode, "must be a BIC: a 4-letter bank code, a 2-letter country code, 2 letters or digits, and optionally 3 more")
	f.text("description", req.Description, 140)
	f.metadata(&req.Metadata)
	return fingerprinted(req, f, idempotency.RoutePayouts)
}

var (
	accountNumber = regexp.MustCompile(`^[0-9]{6,34}$`)
	bankCode      = regexp.MustCompile(`^[A-Z]{6}[A-Z0-9]{2}([A-Z0-9]{3})?$`)
)

// pattern checks a required field against re.
func (f *fields) pattern(field, value string, re *regexp.Regexp, want string) {
	switch {
	case value == "":
		f.add(field, "is required")
	case !re.MatchString(value):
		f.add(field, "%s", want)
	}
}

// Endpoint is a POST /v1/webhook-endpoints body, decoded once: executed and fingerprinted.
// Whether its URL may be used (https, not a private address) is the handler's to check, as it
// resolves the host.
type Endpoint struct {
	URL        string   `json:"url"`
	EventTypes []string `json:"event_types"`
}

// DecodeEndpoint decodes and validates a webhook endpoint request and returns its fingerprint.
// eventTypes are the types an endpoint may subscribe to ("*" alone is all of them).
func DecodeEndpoint(body []byte, eventTypes []string) (Endpoint, []byte, error) {
	var req Endpoint
	if err := decode(body, &req); err != nil {
		return req, nil, err
	}
	var f fields
	if req.URL == "" {
		f.add("url", "is required")
	}
	f.text("url", req.URL, 2048)
	switch {
	case len(req.EventTypes) == 0:
		f.add("event_types", `is required: a list of event types, or ["*"] for all`)
	case slices.Contains(req.EventTypes, "*") && len(req.EventTypes) > 1:
		f.add("event_types", `"*" stands for every type and comes alone`)
	default:
		seen := map[string]bool{}
		for i, t := range req.EventTypes {
			field := fmt.Sprintf("event_types[%d]", i)
			switch {
			case t != "*" && !slices.Contains(eventTypes, t):
				f.add(field, "must be one of %s, or \"*\"", strings.Join(eventTypes, ", "))
			case seen[t]:
				f.add(field, "is given more than once")
			}
			seen[t] = true
		}
	}
	return fingerprinted(req, f, idempotency.RouteEndpoints)
}

// Refund is a POST /v1/transfers/{id}/refunds body, decoded once: executed and fingerprinted
// with the transfer it refunds (the route's scope is the same for every transfer, so a key
// used for one transfer's refund and then another's is a key reused).
type Refund struct {
	TransferID string `json:"transfer_id"` // from the path, not the body
	// AmountMinor is nil when the body leaves it out: all that remains to refund.
	AmountMinor *int64            `json:"amount_minor,omitempty"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// refundBody is what a refund's body may hold.
type refundBody struct {
	AmountMinor *int64            `json:"amount_minor,omitempty"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// DecodeRefund decodes and validates a refund of transferID and returns its fingerprint.
func DecodeRefund(transferID string, body []byte) (Refund, []byte, error) {
	var b refundBody
	if err := decode(body, &b); err != nil {
		return Refund{}, nil, err
	}
	req := Refund{TransferID: transferID, AmountMinor: b.AmountMinor, Description: b.Description, Metadata: b.Metadata}
	var f fields
	if req.AmountMinor != nil {
		if *req.AmountMinor == 0 {
			f.add("amount_minor", "must be a positive integer count of minor units, or left out to refund all that remains")
		} else {
			f.amount(*req.AmountMinor)
		}
	}
	f.text("description", req.Description, 140)
	f.metadata(&req.Metadata)
	return fingerprinted(req, f, idempotency.RouteRefunds)
}
