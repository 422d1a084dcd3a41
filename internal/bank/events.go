package bank

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries the bank's signature of a callback.
const SignatureHeader = "Bank-Signature"

// Tolerance is how far a callback's signing time may be from now, either way: an older one is
// a replay, a later one a clock the processor cannot trust.
const Tolerance = 5 * time.Minute

// Event types the bank sends.
const (
	PaymentPaid     = "payment.paid"
	PaymentFailed   = "payment.failed"
	PaymentReturned = "payment.returned"
	CreditReceived  = "credit.received"
)

// Event is a bank callback, verified and decoded once: the event acted on is the event signed.
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      EventData `json:"data"`
}

// EventData is what an event says: of a payment (PaymentID, Reference, Reason) or of a credit
// (AccountNumber, AmountMinor, Currency, Reference).
type EventData struct {
	PaymentID     string `json:"payment_id,omitempty"`
	Reference     string `json:"reference,omitempty"`
	Reason        string `json:"reason,omitempty"`
	AccountNumber string `json:"account_number,omitempty"`
	AmountMinor   int64  `json:"amount_minor,omitempty"`
	Currency      string `json:"currency,omitempty"`
}

// ErrSignature is a callback whose signature does not verify, is missing, or was made too long
// ago (or too far ahead) to trust.
var ErrSignature = errors.New("the bank's signature does not verify")

// Sign returns the header value signing body at t with secret.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return fmt.Sprintf("t=%s,v1=%s", ts, hex.EncodeToString(mac(secret, ts, body)))
}

// mac is the HMAC of "<t>." + body, t as written in the header.
func mac(secret []byte, t string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(t + "."))
	m.Write(body)
	return m.Sum(nil)
}

// ReadEvent verifies header, the Bank-Signature of body, at now, and decodes that same body. A
// header may carry several v1 values (while the bank rotates its secret): one that verifies is
// enough.
func ReadEvent(secret []byte, header string, body []byte, now time.Time) (Event, error) {
	if err := verify(secret, header, body, now); err != nil {
		return Event{}, err
	}
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("a signed event that is not JSON: %w", err)
	}
	if e.ID == "" || e.Type == "" {
		return Event{}, errors.New("a signed event without an id or a type")
	}
	return e, nil
}

func verify(secret []byte, header string, body []byte, now time.Time) error {
	var t int64
	var written string // t as the header writes it: what the bank signed
	var sigs [][]byte
	haveT := false
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || haveT {
				return ErrSignature
			}
			t, written, haveT = n, v, true
		case "v1":
			if sig, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	if !haveT || len(sigs) == 0 || len(secret) == 0 {
		return ErrSignature
	}
	if d := now.Sub(time.Unix(t, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: signed %s from now", ErrSignature, d.Round(time.Second))
	}
	want := mac(secret, written, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return ErrSignature
}
