// Package webhook signs and verifies webhooks (and, by the same scheme, the bank's callbacks) and
// decides which URLs deliveries may go to.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries the signature of a delivery (docs/contract.md §7).
const SignatureHeader = "Payments-Signature"

// EventIDHeader carries the event's id, by which consumers deduplicate (deliveries are at least once).
const EventIDHeader = "Payments-Event-Id"

// DefaultTolerance is how far a signature's timestamp may be from the receiver's clock: enough
// for clock skew and a slow network, short enough that a captured delivery cannot be replayed later.
const DefaultTolerance = 5 * time.Minute

// secretPrefix starts every endpoint secret, so a leaked one is recognisable in logs and scanners.
const secretPrefix = "whsec_"

// Verify's errors wrap one of these, so a receiver can tell a broken sender (ErrBadHeader), a
// clock or replay problem (ErrTooOld) and a wrong secret or altered body (ErrNoMatch) apart.
var (
	ErrBadHeader = errors.New("malformed " + SignatureHeader + " header")
	ErrTooOld    = errors.New("signature timestamp is outside the tolerance")
	ErrNoMatch   = errors.New("no signature matches the body")
)

// NewSecret returns a new endpoint secret: "whsec_" and 32 random bytes in lowercase hex.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (it crashes the program rather than return weak bytes)
	return secretPrefix + hex.EncodeToString(b)
}

// Sign returns the SignatureHeader value for body sent at t: "t=<unix>,v1=<hex HMAC-SHA256(secret,
// "<t>." + body)>", the timestamp signed so that an old delivery cannot be replayed with a new one.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a SignatureHeader value against body: comma-separated k=v pairs, exactly one t,
// one or more v1 (a sender rotating its secret signs with both), other keys ignored. The body is
// accepted when t is within tolerance of now and one v1 is the HMAC of it under secret.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var haveT bool
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		// Optional whitespace after a comma is tolerated: hand-written receivers' tests add it.
		k, v, ok := strings.Cut(strings.Trim(part, " \t"), "=")
		if !ok {
			return fmt.Errorf("%w: %q is not key=value", ErrBadHeader, part)
		}
		switch k {
		case "t":
			if haveT {
				// Two timestamps: which one was signed is ambiguous, so neither is trusted.
				return fmt.Errorf("%w: t given more than once", ErrBadHeader)
			}
			ts, haveT = v, true
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if !haveT {
		return fmt.Errorf("%w: no t", ErrBadHeader)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	// Only the form Sign writes is accepted ("+5" or "05" would be other strings under the MAC).
	if err != nil || strconv.FormatInt(sec, 10) != ts {
		return fmt.Errorf("%w: t %q is not unix seconds", ErrBadHeader, ts)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no v1", ErrBadHeader)
	}
	if !within(sec, now.Unix(), tolerance) {
		return fmt.Errorf("%w: t=%d, now %d, tolerance %s", ErrTooOld, sec, now.Unix(), tolerance)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		// A v1 that is not hex cannot match; it does not spoil the others.
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrNoMatch
}

// within reports whether |a-b| <= tol in whole seconds, computed in uint64 larger-first, so that a
// forged t near the int64 limits cannot overflow into the window.
func within(a, b int64, tol time.Duration) bool {
	if tol < 0 {
		return false
	}
	var d uint64
	if a >= b {
		d = uint64(a) - uint64(b)
	} else {
		d = uint64(b) - uint64(a)
	}
	return d <= uint64(tol/time.Second)
}
