package bank

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/payments/payments/internal/strictjson"
	"github.com/payments/payments/internal/webhook"
)

// SignatureHeader carries the bank's signature of a callback.
const SignatureHeader = "Bank-Signature"

// Tolerance is how far a callback's signing time may be from now, either way.
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

// EventData is what an event says, of a payment or of a credit.
type EventData struct {
	PaymentID     string `json:"payment_id,omitempty"`
	Reference     string `json:"reference,omitempty"`
	Reason        string `json:"reason,omitempty"`
	AccountNumber string `json:"account_number,omitempty"`
	AmountMinor   int64  `json:"amount_minor,omitempty"`
	Currency      string `json:"currency,omitempty"`
}

// ErrSignature is a callback whose signature is missing, wrong, or outside the Tolerance.
var ErrSignature = errors.New("the bank's signature does not verify")

// Sign returns the header value signing body at t with secret, by the webhooks' scheme.
func Sign(secret []byte, t time.Time, body []byte) string {
	return webhook.Sign(string(secret), t, body)
}

// ErrMalformed is a signed callback that is not one unambiguous event. The bank signed it, so it
// is answered 2xx (taking it again would not help), and it has no effect.
var ErrMalformed = errors.New("a signed callback that is not an event")

// Malformed is an ErrMalformed, and why.
type Malformed struct {
	Reason string // storable text, at most maxReason bytes and an ellipsis
}

func (m *Malformed) Error() string        { return ErrMalformed.Error() + ": " + m.Reason }
func (m *Malformed) Is(target error) bool { return target == ErrMalformed }

// ReadEvent verifies body's Bank-Signature at now and decodes that same body once and strictly:
// the Event is the one reading of the signed bytes (ErrMalformed, saying why, if it is no event).
func ReadEvent(secret []byte, header string, body []byte, now time.Time) (Event, error) {
	if err := verify(secret, header, body, now); err != nil {
		return Event{}, err
	}
	return decodeEvent(body)
}

// MaxIDLength bounds an event id and a type: the id names a workflow (payin/<id>) and a row.
const MaxIDLength = 255

// decodeEvent reads a verified body. Unknown members are ignored (the bank may add some), but
// never one encoding/json would fold onto a known one. Its text is made Storable; its id and
// type, the keys everything is found by, must be storable as they are.
func decodeEvent(body []byte) (Event, error) {
	var e Event
	if err := strictjson.Decode(body, &e, strictjson.Options{IgnoreUnknown: true}); err != nil {
		return Event{}, malformed("%v", err)
	}
	if err := checkKey(e.ID); err != nil {
		return Event{}, malformed("id %v", err)
	}
	if err := checkKey(e.Type); err != nil {
		return Event{}, malformed("type %v", err)
	}
	d := &e.Data
	for _, text := range []*string{&d.PaymentID, &d.Reference, &d.Reason, &d.AccountNumber, &d.Currency} {
		*text = Storable(*text)
	}
	return e, nil
}

func checkKey(v string) error {
	switch {
	case v == "":
		return errors.New("is missing")
	case len(v) > MaxIDLength:
		return fmt.Errorf("is longer than %d bytes", MaxIDLength)
	case strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }):
		return errors.New("holds a control or space character")
	}
	return nil
}

// maxReason bounds the reason kept for a malformed event (a member name may be long).
const maxReason = 500

func malformed(format string, args ...any) error {
	reason := Storable(fmt.Sprintf(format, args...))
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "") + "…"
	}
	return &Malformed{Reason: reason}
}

// Storable is text as PostgreSQL can store it: each NUL, which no text column can hold, written
// as \u0000. Free text is kept that way rather than refused, so that a credit is never lost for
// its reference; an account number or payout id so escaped names nothing, as it should.
func Storable(s string) string {
	return strings.ReplaceAll(s, "\x00", `\u0000`)
}

// verify checks header, the bank's signature of body, at now; without a secret nothing verifies.
func verify(secret []byte, header string, body []byte, now time.Time) error {
	err := webhook.Verify(string(secret), header, body, now, Tolerance)
	switch {
	case len(secret) == 0:
		return ErrSignature
	case errors.Is(err, webhook.ErrTooOld):
		return fmt.Errorf("%w: signed more than %s from now", ErrSignature, Tolerance)
	case err != nil:
		return ErrSignature
	}
	return nil
}
