// Package idempotency holds the Idempotency-Key contract: parsing the header, the canonical
// fingerprint of a request, the scope a key lives in, the identifiers derived from it, and the
// stored responses that make a retry answer exactly like the first request.
package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// Header is the request header that carries the client's key.
const Header = "Idempotency-Key"

// MaxKeyLength bounds a key (docs/contract.md §3); a workflow ID keeps what fits of it (WorkflowID).
const MaxKeyLength = 255

var (
	ErrMissing = errors.New("the Idempotency-Key header is required on every POST")
	ErrInvalid = errors.New("the Idempotency-Key must be 1 to 255 visible ASCII characters (0x21-0x7E), given once")
)

// ParseKey returns the key carried by the header values of one request. Exactly one header line
// is allowed. A value written as an RFC 8941 string ("abc") means its content (abc).
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrMissing
	case 1:
	default:
		return "", ErrInvalid
	}
	// HTTP's optional whitespace (space, tab) around a field value is not part of it; nothing
	// else is stripped (strings.TrimSpace would also take a no-break space, making
	// "order-1\u00a0" the key "order-1").
	key := strings.Trim(values[0], " \t")
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		unquoted, ok := unquoteSFString(key[1 : len(key)-1])
		if !ok {
			return "", ErrInvalid
		}
		key = unquoted
	}
	if key == "" || len(key) > MaxKeyLength {
		return "", ErrInvalid
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7E {
			return "", ErrInvalid
		}
	}
	return key, nil
}

// unquoteSFString undoes RFC 8941 string escaping: only \" and \\ are escapes, and a bare quote
// or backslash is malformed.
func unquoteSFString(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", false
			}
			i++
			b.WriteByte(s[i])
		case '"':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// Scope is where a key lives: the same key under another owner or route is another operation.
type Scope struct {
	OwnerID string
	Route   string // method + route template, e.g. "POST /v1/transfers"
	Key     string
}

// Routes (where keys live), and the short name each has in a workflow ID. A payin's key is the
// bank's event id, in the bank's scope (no owner).
const (
	RouteTransfers = "POST /v1/transfers"
	RouteAccounts  = "POST /v1/accounts"
	RouteDeposit   = "CLI deposit"
	RoutePayouts   = "POST /v1/payouts"
	RoutePayin     = "BANK credit.received"
	RouteEndpoints = "POST /v1/webhook-endpoints"
	RouteRefunds   = "POST /v1/transfers/{id}/refunds"
	// An authorization, and the payee's decisions on it (their scopes name no workflow: a
	// decision is an Update of the authorization's run).
	RouteAuthorizations = "POST /v1/authorizations"
	RouteCapture        = "POST /v1/authorizations/{id}/capture"
	RouteVoid           = "POST /v1/authorizations/{id}/void"
	// A second key's decision on a payout waiting for approval: an Update of the payout's run.
	RouteApprove = "POST /v1/payouts/{id}/approve"
	RouteReject  = "POST /v1/payouts/{id}/reject"
	// A scheduled transfer, and each of its occurrences: an ordinary transfer whose key is
	// <schedule id>/<occurrence number>, in the scope of the schedule's owner (OccurrenceScope).
	RouteScheduledTransfers = "POST /v1/scheduled-transfers"
	RouteOccurrence         = "SCHEDULE occurrence"
)

var routeNames = map[string]string{RouteTransfers: "transfer", RouteDeposit: "deposit", RouteAccounts: "account",
	RoutePayouts: "payout", RoutePayin: "payin", RouteEndpoints: "webhook-endpoint", RouteRefunds: "refund",
	RouteAuthorizations: "authorization", RouteCapture: "capture", RouteVoid: "void", RouteApprove: "approve", RouteReject: "reject",
	RouteScheduledTransfers: "scheduled-transfer", RouteOccurrence: "occurrence"}

// WorkflowID is the Temporal workflow ID of the operation in scope s:
//
//	<route name>/<owner id>/<key>      e.g. transfer/own_1a2b…/order-1234
//
// It is a pure function of the scope, reads well in the Temporal UI, and keeps the client's key
// verbatim at the end (keys are visible ASCII, so the ID needs no escaping; the owner id never
// contains '/', so the split is unambiguous). A payin's is payin/<bank event id>.
//
// A Temporal cluster on SQL persistence stores workflow IDs of at most MaxWorkflowID bytes, and a
// key may be 255 characters: when the ID would be longer, its key is cut to what fits and ends
// with "~" and the first 128 bits of the whole key's SHA-256 in hex, still unique to the scope.
// The ledger holds the same ID; ScopeOf gives such a scope without its key.
func (s Scope) WorkflowID() string {
	id := routeNames[s.Route] + "/" + s.OwnerID + "/" + s.Key
	if s.Route == RoutePayin {
		id = routeNames[s.Route] + "/" + s.Key
	}
	if len(id) <= MaxWorkflowID {
		return id
	}
	sum := sha256.Sum256([]byte(s.Key))
	digest := "~" + hex.EncodeToString(sum[:16])
	return id[:MaxWorkflowID-len(digest)] + digest
}

// MaxWorkflowID is the longest workflow ID Temporal stores on PostgreSQL or MySQL (a
// varchar(255) column), in bytes.
const MaxWorkflowID = 255

// shortened matches the end of a WorkflowID whose key was cut.
var shortened = regexp.MustCompile(`~[0-9a-f]{32}$`)

// ScopeOf is the scope whose WorkflowID is id; ok is false for an ID no scope has. For the ID of
// a key too long to appear whole (WorkflowID), the scope has its owner and route but Key is
// empty: the key is in the scope's idempotency record (KeyOf).
func ScopeOf(id string) (s Scope, ok bool) {
	name, rest, _ := strings.Cut(id, "/")
	if name == routeNames[RoutePayin] {
		s = Scope{Route: RoutePayin, Key: rest}
		ok = rest != ""
	} else if owner, key, found := strings.Cut(rest, "/"); found && owner != "" && key != "" {
		for route, n := range routeNames {
			if n == name {
				s, ok = Scope{OwnerID: owner, Route: route, Key: key}, true
			}
		}
	}
	if ok && len(id) == MaxWorkflowID && shortened.MatchString(id) {
		s.Key = ""
	}
	return s, ok
}

// TransferID is the id of the transfer made by the use-th operation in scope s (0 for the
// first): a pure function of both, so every retry, re-run and UI Reset of an operation names the
// same transfer and the ledger can refuse to post it twice. use only grows when a key is used
// again after its record expired; the new operation then gets a transfer of its own.
func (s Scope) TransferID(use int) string { return s.id("tr_", use) }

// PayoutID is the id of the payout made by the use-th operation in scope s, as TransferID is a
// transfer's: the key the bank deduplicates the payout's instruction on.
func (s Scope) PayoutID(use int) string { return s.id("po_", use) }

// RefundID is the id of the refund made by the use-th operation in scope s, as TransferID is a
// transfer's.
func (s Scope) RefundID(use int) string { return s.id("rf_", use) }

// AuthorizationID is the id of the authorization made by the use-th operation in scope s, as
// TransferID is a transfer's; its capture's entries name it too.
func (s Scope) AuthorizationID(use int) string { return s.id("au_", use) }

// ScheduledTransferID is the id of the scheduled transfer made by the use-th operation in scope
// s, as TransferID is a transfer's.
func (s Scope) ScheduledTransferID(use int) string { return s.id("st_", use) }

// OccurrenceScope is the scope of occurrence n (from 1) of scheduled transfer id, whose owner is
// ownerID: a pure function of the schedule and the number, so an occurrence fired twice (caught
// up after downtime, re-run, retried) is one operation, one transfer (TransferID(0)). Its
// workflow ID is occurrence/<owner>/<schedule id>/<n>.
func OccurrenceScope(ownerID, id string, n int) Scope {
	return Scope{OwnerID: ownerID, Route: RouteOccurrence, Key: id + "/" + strconv.Itoa(n)}
}

// PayinID is the id of the payin (and of its posting) of the bank event a payin scope names.
func (s Scope) PayinID() string { return s.id("pi_", 0) }

func (s Scope) id(prefix string, use int) string {
	material := s.OwnerID + "\x00" + s.Route + "\x00" + s.Key
	if use > 0 {
		material += "\x00" + strconv.Itoa(use)
	}
	sum := sha256.Sum256([]byte(material))
	return prefix + hex.EncodeToString(sum[:12])
}
