// Package bank is how the processor talks to a bank (docs/bank.md): the Rail interface, its HTTP
// client for the simulator's rail, and the bank's signed callbacks, verified and decoded once.
package bank

import (
	"context"
	"errors"
	"time"
)

// Destination is where a payout's money goes.
type Destination struct {
	AccountNumber string `json:"account_number"`
	BankCode      string `json:"bank_code"`
}

// Instruction is a payment the processor asks the bank to make. Key, derived from the payout, is
// the same in every retry, re-run and Reset, so the bank makes one payment.
type Instruction struct {
	Key         string
	AmountMinor int64
	Currency    string
	Destination Destination
	Reference   string // the payout id, quoted back in the bank's events
}

// Statuses of a payment at the bank.
const (
	Pending  = "pending"
	Paid     = "paid"
	Failed   = "failed"
	Returned = "returned"
)

// Payment is the bank's record of an instruction.
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
}

// storable makes the payment's free text storable (Storable): its reason is the bank's words.
func (p *Payment) storable() {
	if p.Reason != nil {
		r := Storable(*p.Reason)
		p.Reason = &r
	}
}

// Rail is a bank's payment API as the processor uses it.
type Rail interface {
	// Send gives the bank an instruction. Sending the same instruction again (same Key) is one
	// payment. ErrRefused is a final no: nothing was made. Any other error leaves the outcome
	// unknown: the payment may or may not exist, and sending again, or Find, tells.
	Send(ctx context.Context, in Instruction) (Payment, error)
	// Find returns the payment made for instruction key, found false if the bank never got it.
	Find(ctx context.Context, key string) (p Payment, found bool, err error)
	// Statement lists every payment the bank holds, for reconciliation.
	Statement(ctx context.Context) ([]Payment, error)
}

// ErrRefused is an instruction the bank refused for good: no payment exists.
var ErrRefused = errors.New("the bank refused the instruction")
