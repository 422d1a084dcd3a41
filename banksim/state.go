package banksim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Payment statuses (docs/bank.md, "Lifecycle").
const (
	statusPending  = "pending"
	statusPaid     = "paid"
	statusFailed   = "failed"
	statusReturned = "returned"
)

// Reasons the simulator gives for a failure or a return.
const (
	reasonAccountClosed = "account_closed"
	reasonRejected      = "rejected_by_beneficiary_bank"
	reasonReturned      = "returned_by_beneficiary_bank" // a return drawn by --return-rate, or by the admin without a reason
)

// Destination is where a payment goes.
type Destination struct {
	AccountNumber string `json:"account_number"`
	BankCode      string `json:"bank_code"`
}

// Instruction is the body of POST /payments.
type Instruction struct {
	AmountMinor int64       `json:"amount_minor"`
	Currency    string      `json:"currency"`
	Destination Destination `json:"destination"`
	Reference   string      `json:"reference"`
}

// Payment is the rail's view of an instruction, as GET /payments/{id} shows it.
type Payment struct {
	ID             string      `json:"id"`
	Status         string      `json:"status"`
	AmountMinor    int64       `json:"amount_minor"`
	Currency       string      `json:"currency"`
	Destination    Destination `json:"destination"`
	Reference      string      `json:"reference"`
	IdempotencyKey string      `json:"idempotency_key"`
	Reason         *string     `json:"reason"`
	CreatedAt      time.Time   `json:"created_at"`
	SettledAt      *time.Time  `json:"settled_at"`
	ReturnedAt     *time.Time  `json:"returned_at"`
}

func (p *Payment) instruction() Instruction {
	return Instruction{AmountMinor: p.AmountMinor, Currency: p.Currency, Destination: p.Destination, Reference: p.Reference}
}

// record is a payment with what the bank keeps to itself: when it settles and whether (and
// when, and why) it will be returned. Settle and return times are fixed when decided, so a
// restart keeps them.
type record struct {
	Payment
	SettleAt     time.Time  `json:"settle_at"`
	ReturnAt     *time.Time `json:"return_at,omitempty"`
	ReturnReason string     `json:"return_reason,omitempty"`
}

// Credit is money arriving for an account (POST /admin/credits).
type Credit struct {
	ID            string    `json:"id"`
	AccountNumber string    `json:"account_number"`
	AmountMinor   int64     `json:"amount_minor"`
	Currency      string    `json:"currency"`
	Reference     string    `json:"reference"`
	CreatedAt     time.Time `json:"created_at"`
	EventID       string    `json:"event_id"`
}

// Delivery states of an event.
const (
	deliveryPending   = "pending"   // being sent, or to be sent (again after a restart)
	deliveryDelivered = "delivered" // some attempt was answered 2xx
	deliveryDropped   = "dropped"   // --callback-drop-rate: never sent (unless resent by the admin)
	deliveryFailed    = "failed"    // every attempt failed
)

// Event is a callback: its body is built once, so every attempt and every resend carries the
// same bytes (only the signature changes).
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Body      string    `json:"body"`
	Delivery  string    `json:"delivery"`
	Attempts  []Attempt `json:"attempts"`
}

// Attempt is one POST of an event to the callback URL: the HTTP status, or the error when
// there was no answer.
type Attempt struct {
	At     time.Time `json:"at"`
	Try    int       `json:"try"` // 1 to maxAttempts within its round of delivery
	Status int       `json:"status,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// paymentData and creditData are an event's data (docs/bank.md, "Callbacks").
type paymentData struct {
	PaymentID string `json:"payment_id"`
	Reference string `json:"reference"`
	Reason    string `json:"reason,omitempty"`
}

type creditData struct {
	AccountNumber string `json:"account_number"`
	AmountMinor   int64  `json:"amount_minor"`
	Currency      string `json:"currency"`
	Reference     string `json:"reference"`
}

// state is everything the bank holds, oldest first; it is also the state file's shape.
type state struct {
	Payments []*record `json:"payments"`
	Credits  []*Credit `json:"credits"`
	Events   []*Event  `json:"events"`
}

// index finds payments and events by id and payments by idempotency key.
type index struct {
	byID    map[string]*record
	byKey   map[string]*record
	eventOf map[string]*Event
}

func (st *state) index() index {
	ix := index{byID: map[string]*record{}, byKey: map[string]*record{}, eventOf: map[string]*Event{}}
	for _, r := range st.Payments {
		ix.byID[r.ID] = r
		ix.byKey[r.IdempotencyKey] = r
	}
	for _, e := range st.Events {
		ix.eventOf[e.ID] = e
	}
	return ix
}

// load reads the state file; a missing file is an empty bank.
func load(path string) (state, error) {
	var st state
	if path == "" {
		return st, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("state file %s: %v", path, err)
	}
	return st, nil
}

// save writes the state file atomically: a temporary file in the same directory, renamed over
// the old one, so a killed simulator leaves either the old state or the new one, never half.
// There is no fsync: the simulator must survive its process being killed (the fault tests do
// that), not the machine losing power, and an fsync per change would cost milliseconds each.
func save(path string, st *state) error {
	if path == "" {
		return nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err2 := f.Close(); err == nil {
		err = err2
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("writing the state file: %w", err)
	}
	return nil
}

// newID is prefix + 24 random hex digits. Ids come from crypto/rand, not from the seeded
// source: a restart with the same --seed must not issue an id again (the processor
// deduplicates events by id).
func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// now is the time the bank records: UTC, to the microsecond.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// The bank's rules for an instruction it accepts.
var (
	currencies    = []string{"USD", "EUR", "GBP", "JPY", "CHF", "CAD"}
	accountNumber = regexp.MustCompile(`^[0-9]{6,34}$`)
	bankCode      = regexp.MustCompile(`^[A-Z]{6}[A-Z0-9]{2}([A-Z0-9]{3})?$`) // a BIC
	currencyCode  = regexp.MustCompile(`^[A-Z]{3}$`)
)

// validate says why the bank refuses an instruction, or "" when it accepts it.
func (in Instruction) validate() string {
	switch {
	case in.AmountMinor <= 0:
		return "amount_minor must be positive"
	case !slices.Contains(currencies, in.Currency):
		return fmt.Sprintf("unsupported currency %q", in.Currency)
	case !accountNumber.MatchString(in.Destination.AccountNumber):
		return "destination.account_number must be 6 to 34 digits"
	case !bankCode.MatchString(in.Destination.BankCode):
		return "destination.bank_code must be a BIC (8 or 11 letters and digits)"
	case in.Reference == "" || len(in.Reference) > 140:
		return "reference must be 1 to 140 characters"
	case strings.HasSuffix(in.Destination.AccountNumber, "0004"):
		return "destination.account_number does not exist at the beneficiary's bank"
	}
	return ""
}

// validKey: an Idempotency-Key is 1 to 255 visible ASCII characters.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// validate says why POST /admin/credits is refused, or "".
func (c *Credit) validate() string {
	switch {
	case c.AccountNumber == "" || len(c.AccountNumber) > 34:
		return "account_number must be 1 to 34 characters"
	case c.AmountMinor <= 0:
		return "amount_minor must be positive"
	case !currencyCode.MatchString(c.Currency):
		return "currency must be an ISO 4217 code"
	case len(c.Reference) > 140:
		return "reference must be at most 140 characters"
	}
	return ""
}
