package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// Held is what holding a payout's money ended with: processing or pending_approval (held), or
// failed (not enough available), the first answer stored for it, and the bank's payment of it if an earlier run
// recorded one (a run again knows its payment without asking the bank).
type Held struct {
	Status        ledger.PayoutStatus
	Response      idempotency.Response
	BankPaymentID string `json:",omitempty"`
}

// BankOutcome is what the bank says of a payout's payment: its id and status (bank.Pending,
// Paid, Failed, Returned; "" when the bank never got the instruction) and the reason of a
// failure or a return.
type BankOutcome struct {
	PaymentID string
	Status    string
	Reason    string
}

// Error types no retry can fix. BankRefused: the bank refused the instruction for good (the
// payout fails). BankMismatch: the bank holds, under the payout's key, a payment that is not
// the payout's, or a second payment for it (a person must look).
const (
	ErrTypeBankRefused  = "BankRefused"
	ErrTypeBankMismatch = "BankMismatch"
)

// HoldPayout holds the payout's money and stores its first answer, once, however often it is
// called (ledger.PlaceHold).
func (a *Activities) HoldPayout(ctx context.Context, h ledger.PayoutHold) (Held, error) {
	po, resp, err := a.Ledger.PlaceHold(ctx, h, a.PayoutAnswer)
	if err != nil {
		return Held{}, retried(ctx, "holding", "payout_id", h.PayoutID, err)
	}
	activity.GetLogger(ctx).Info("payout held", "payout_id", h.PayoutID, "status", po.Status)
	if a.OnAnswer != nil {
		a.OnAnswer.Answered(h.PayoutID, resp)
	}
	held := Held{Status: po.Status, Response: resp}
	if po.BankPaymentID != nil {
		held.BankPaymentID = *po.BankPaymentID
	}
	return held, nil
}

// DecideApproval approves, rejects, times out or cancels a payout waiting for approval, if it
// still is, and stores the decision's answer under its scope, once (ledger.DecideApproval). The
// result is the payout's status after it, and that answer.
func (a *Activities) DecideApproval(ctx context.Context, d ledger.Approval) (Held, error) {
	po, resp, err := a.Ledger.DecideApproval(ctx, d, a.ApprovalAnswer)
	if err != nil {
		return Held{}, retried(ctx, string(d.Verdict), "payout_id", d.PayoutID, err)
	}
	activity.GetLogger(ctx).Info("payout decided", "payout_id", d.PayoutID, "verdict", d.Verdict, "status", po.Status)
	return Held{Status: po.Status, Response: resp}, nil
}

// SendPayout gives the bank the payout's instruction, under the key derived from the payout, and
// records the bank's payment id. A bank that does not answer, or answers anything but yes or a
// final no, leaves the outcome unknown: the activity is retried with the same key, and the bank
// makes one payment. A final no fails the payout.
func (a *Activities) SendPayout(ctx context.Context, in bank.Instruction) (BankOutcome, error) {
	p, err := a.Bank.Send(ctx, in)
	if errors.Is(err, bank.ErrRefused) {
		return BankOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBankRefused, err)
	}
	if err != nil {
		activity.GetLogger(ctx).Warn("the bank's answer is unknown; asking again with the same key", "payout_id", in.Reference, "err", err)
		return BankOutcome{}, err
	}
	return a.record(ctx, in, p)
}

// CheckPayout asks the bank how the payment of the instruction stands, when no callback came. A
// bank that has no payment under its key (it never got it, or lost it) is given the instruction
// again: the same key, one payment.
func (a *Activities) CheckPayout(ctx context.Context, in bank.Instruction) (BankOutcome, error) {
	p, found, err := a.Bank.Find(ctx, in.Key)
	if err == nil && !found {
		activity.GetLogger(ctx).Warn("the bank has no payment under the payout's key; sending the instruction again", "payout_id", in.Reference)
		return a.SendPayout(ctx, in)
	}
	if err != nil {
		return BankOutcome{}, err
	}
	return a.record(ctx, in, p)
}

// record checks that the bank's payment is the instruction's and records its id against the
// payout. A payment that is not (another amount, currency, destination, reference), or a second
// payment for the payout, is not retried: a person must look.
func (a *Activities) record(ctx context.Context, in bank.Instruction, p bank.Payment) (BankOutcome, error) {
	if p.AmountMinor != in.AmountMinor || p.Currency != in.Currency || p.Destination != in.Destination || p.Reference != in.Reference {
		err := fmt.Errorf("the bank's payment %s under key %s is %d %s to %v for %q, the instruction %d %s to %v for %q",
			p.ID, in.Key, p.AmountMinor, p.Currency, p.Destination, p.Reference, in.AmountMinor, in.Currency, in.Destination, in.Reference)
		return BankOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBankMismatch, err)
	}
	err := a.Ledger.RecordBankPayment(ctx, in.Reference, p.ID)
	if errors.Is(err, ledger.ErrSecondBankPayment) {
		return BankOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBankMismatch, err)
	}
	if err != nil {
		return BankOutcome{}, err
	}
	return outcomeOf(p), nil
}

func outcomeOf(p bank.Payment) BankOutcome {
	o := BankOutcome{PaymentID: p.ID, Status: p.Status}
	if p.Reason != nil {
		o.Reason = *p.Reason
	}
	return o
}

// SettlePayout ends the payout as the bank said, once: paid (the hold posted) or failed for
// reason (the hold released).
func (a *Activities) SettlePayout(ctx context.Context, payoutID string, paid bool, reason string) (ledger.PayoutStatus, error) {
	po, err := a.Ledger.SettlePayout(ctx, payoutID, paid, reason)
	return po.Status, final(err)
}

// ReturnPayout credits a paid payout back, once, when its beneficiary's bank returned it.
func (a *Activities) ReturnPayout(ctx context.Context, payoutID, reason string) (ledger.PayoutStatus, error) {
	po, err := a.Ledger.ReturnPayout(ctx, payoutID, reason)
	return po.Status, final(err)
}

// final marks an error of the ledger that no retry can fix as not to be retried.
func final(err error) error {
	if errors.Is(err, ledger.ErrInvalidPosting) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidPosting, err)
	}
	return err
}
