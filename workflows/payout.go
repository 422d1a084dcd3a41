package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/payout"
)

// PayoutInput is what a payout workflow takes: the payout (its id, derived from the request
// alone, and the scope its first answer is stored under), what to pay where, and how patient to
// be with the bank.
type PayoutInput struct {
	activities.PayoutHold
	WorkflowID   string
	AccountID    string
	AmountMinor  int64
	Currency     string
	Destination  bank.Destination
	Description  string
	Metadata     map[string]string   `json:",omitempty"` // the client's; in the run's memo, never in its search attributes
	RetryFor     activities.Duration // how long holding the money retries technical failures
	BankRetryFor activities.Duration // how long to keep giving the bank the instruction before the run fails
	PollAfter    activities.Duration // how long to wait for the bank's callback before asking it
	ReturnWindow activities.Duration // how long after it is paid a return is still awaited
}

// Instruction is what the bank is asked to pay: keyed by the payout id, so that every retry,
// re-run and Reset asks for the same payment.
func (in PayoutInput) Instruction() bank.Instruction {
	return bank.Instruction{Key: in.PayoutID, AmountMinor: in.AmountMinor, Currency: in.Currency,
		Destination: in.Destination, Reference: in.PayoutID}
}

// PayoutOutcome is what a payout workflow returns: the payout's final status, and its first
// answer (201 processing, or 422 insufficient-funds), which the API sends as it is.
type PayoutOutcome struct {
	Status   payout.Status
	Response idempotency.Response
}

// BankEventUpdate is the Update that delivers a bank callback about the payout to its run. Its
// ID is the bank's event id: Temporal applies an Update of one ID once per run, so a callback
// the bank sends twice changes nothing the second time.
const BankEventUpdate = "bank-event"

// ErrTypeOtherPayout is a BankEventUpdate refused because the event is about another payout:
// the run is a later use's of the key, and the event's payout has no run any more.
const ErrTypeOtherPayout = "OtherPayout"

// BankEvent is a bank callback about a payout's payment.
type BankEvent struct {
	ID        string
	Type      string // bank.PaymentPaid, PaymentFailed, PaymentReturned
	PaymentID string
	Reference string // the payout id
	Reason    string
}

// Payout search attribute: where the payout stands, including what its run waits for.
var PayoutStatus = temporal.NewSearchAttributeKeyKeyword("PayoutStatus")

// Defaults where a payout's input does not say.
const (
	DefaultBankRetryFor = 24 * time.Hour
	DefaultPollAfter    = time.Minute
	DefaultReturnWindow = 7 * 24 * time.Hour
	maxPollInterval     = time.Hour
	returnPollInterval  = 24 * time.Hour
)

// PayoutSearchAttributes are the attributes a payout starts with.
func PayoutSearchAttributes(in PayoutInput) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		PayoutStatus.ValueSet(string(payout.Holding)),
		FromAccount.ValueSet(in.AccountID),
		Currency.ValueSet(in.Currency),
		AmountMinor.ValueSet(in.AmountMinor),
	)
}

// PayoutSummary is the one line the Temporal UI shows for a payout.
func PayoutSummary(in PayoutInput) string {
	return fmt.Sprintf("payout of %s %s minor from %s to %s at %s", groupThousands(in.AmountMinor), in.Currency,
		in.AccountID, in.Destination.AccountNumber, in.Destination.BankCode)
}

// Payout moves money out through the bank. It holds the money (a local activity, answered at
// once like a transfer's posting: 201 processing, or 422 for insufficient funds), gives the bank
// the instruction (a regular activity, retried while the bank does not answer: a timeout is an
// unknown outcome, and the same key makes one payment), then waits for the bank's outcome: a
// callback delivered as an Update, or, when none comes in time, its own question to the bank.
// Paid: the hold is posted to the settlement account; then a return is awaited for
// ReturnWindow, and credits the money back if it comes. Failed: the hold is released.
//
// A payout once accepted is not cancelled: its money is with the bank, or on its way, and only
// the bank's word ends it. The run ignores a Cancel request (an operator who must stop it
// terminates it, and its money stays held until it is run again: docs/runbook.md).
func Payout(ctx workflow.Context, in PayoutInput) (PayoutOutcome, error) {
	var a *activities.Activities
	run := &payoutRun{id: in.PayoutID}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, BankEventUpdate, run.receive,
		workflow.UpdateHandlerOptions{Validator: run.validate}); err != nil {
		return PayoutOutcome{}, err
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	holdCtx := workflow.WithLocalActivityOptions(ctx, ledgerOptions(in.RetryFor))
	var held activities.Held
	if err := workflow.ExecuteLocalActivity(holdCtx, a.HoldPayout, in.PayoutHold).Get(holdCtx, &held); err != nil {
		return PayoutOutcome{}, err
	}
	out := PayoutOutcome{Status: held.Status, Response: held.Response}
	switch held.Status {
	case payout.Processing:
	case payout.Paid: // run again after it was paid (its run ended early): its return window still counts
		run.note(bank.Paid, "")
		return awaitAndReturn(ctx, a, in, run, out)
	default: // refused for insufficient funds, or already failed or returned: nothing more to do
		setPayoutStatus(ctx, held.Status)
		return out, nil
	}

	setPayoutStatus(ctx, payout.Sending)
	var sent activities.BankOutcome
	err := workflow.ExecuteActivity(bankOptions(ctx, in), a.SendPayout, in.Instruction()).Get(ctx, &sent)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeBankRefused {
		out.Status, err = settle(ctx, a, in, bank.Failed, "refused by the bank")
		return out, err
	}
	if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeBankMismatch {
		return out, run.mismatch(ctx, err)
	}
	if err != nil { // the bank did not answer for BankRetryFor: the money stays held; rerun failed sends again
		return out, err
	}
	run.note(sent.Status, sent.Reason)

	setPayoutStatus(ctx, payout.AwaitingBank)
	if run.awaitOutcome(ctx, a, in); run.mismatched != nil {
		return out, run.mismatch(ctx, run.mismatched)
	}
	// A ledger that cannot take the outcome for RetryFor fails the run, the money still held:
	// rerun failed asks the bank again (same key) and settles it.
	if out.Status, err = settle(ctx, a, in, run.status, run.reason); err != nil || out.Status != payout.Paid {
		return out, err
	}
	return awaitAndReturn(ctx, a, in, run, out)
}

// mismatch stops at a bank payment that is not the payout's: nothing can be settled safely, and
// the run stays open, shown as bank_mismatch, until a person has looked (and terminates it).
func (r *payoutRun) mismatch(ctx workflow.Context, err error) error {
	workflow.GetLogger(ctx).Error("the bank's payment is not the payout's", "payout_id", r.id, "error", err)
	setPayoutStatus(ctx, payout.BankMismatch)
	return workflow.Await(ctx, func() bool { return false })
}

// awaitAndReturn waits out a paid payout's return window and credits the money back if it is
// returned.
func awaitAndReturn(ctx workflow.Context, a *activities.Activities, in PayoutInput, run *payoutRun, out PayoutOutcome) (PayoutOutcome, error) {
	var err error
	returned := run.awaitReturn(ctx, a, in)
	if run.mismatched != nil {
		return out, run.mismatch(ctx, run.mismatched)
	}
	if returned {
		out.Status, err = settleReturn(ctx, a, in, run.reason)
	}
	return out, err
}

// payoutRun is what a payout's run has heard from the bank.
type payoutRun struct {
	id         string
	status     string // the bank's: "", pending, paid, failed, returned
	reason     string
	mismatched error // the bank's payment under the payout's key is not the payout's
}

func (r *payoutRun) validate(_ workflow.Context, e BankEvent) error {
	if e.Reference != r.id {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("event %s is about %s, not payout %s", e.ID, e.Reference, r.id),
			ErrTypeOtherPayout, nil)
	}
	switch e.Type {
	case bank.PaymentPaid, bank.PaymentFailed, bank.PaymentReturned:
		return nil
	}
	return fmt.Errorf("event %s of type %s is not about a payment", e.ID, e.Type)
}

func (r *payoutRun) receive(_ workflow.Context, e BankEvent) error {
	switch e.Type {
	case bank.PaymentPaid:
		r.note(bank.Paid, "")
	case bank.PaymentFailed:
		r.note(bank.Failed, e.Reason)
	case bank.PaymentReturned:
		r.note(bank.Returned, e.Reason)
	}
	return nil
}

// note takes what the bank says, in whatever order it says it: a payment only moves forward
// (pending → paid or failed; paid → returned), so a late or repeated word cannot undo a later
// one. A return heard while still pending implies the payment was paid first.
func (r *payoutRun) note(status, reason string) {
	rank := map[string]int{"": 0, bank.Pending: 1, bank.Paid: 2, bank.Failed: 2, bank.Returned: 3}
	if rank[status] > rank[r.status] && !(r.status == bank.Failed && status == bank.Returned) {
		r.status = status
		if reason != "" {
			r.reason = reason
		}
	}
}

// awaitOutcome waits for the bank's outcome (paid, failed, or returned), from callbacks, asking
// the bank itself each time the wait runs out: after PollAfter, then twice as long each time,
// up to an hour.
func (r *payoutRun) awaitOutcome(ctx workflow.Context, a *activities.Activities, in PayoutInput) {
	done := func() bool { return r.mismatched != nil || (r.status != bank.Pending && r.status != "") }
	first := time.Duration(in.PollAfter)
	if first <= 0 {
		first = DefaultPollAfter
	}
	for wait := first; !done(); wait = min(2*wait, max(first, maxPollInterval)) {
		if ok, _ := workflow.AwaitWithTimeout(ctx, wait, done); !ok {
			r.ask(ctx, a, in)
		}
	}
}

// awaitReturn waits for a return of the paid payout until its window closes, asking the bank
// once a day and at the window's end, in case a callback never came. It reports whether the
// payout was returned.
func (r *payoutRun) awaitReturn(ctx workflow.Context, a *activities.Activities, in PayoutInput) bool {
	returned := func() bool { return r.mismatched != nil || r.status == bank.Returned }
	window := time.Duration(in.ReturnWindow)
	if window <= 0 {
		window = DefaultReturnWindow
	}
	end := workflow.Now(ctx).Add(window)
	for left := window; !returned() && left > 0; left = end.Sub(workflow.Now(ctx)) {
		if ok, _ := workflow.AwaitWithTimeout(ctx, min(left, returnPollInterval), returned); !ok {
			r.ask(ctx, a, in)
		}
	}
	return r.status == bank.Returned
}

// ask asks the bank how the payment stands (and gives it the instruction again if it has none);
// an error (the bank unreachable) is a question for the next time, but a payment that is not the
// payout's stops the run (mismatched).
func (r *payoutRun) ask(ctx workflow.Context, a *activities.Activities, in PayoutInput) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3,
			NonRetryableErrorTypes: []string{activities.ErrTypeBankMismatch, activities.ErrTypeBankRefused}}})
	var o activities.BankOutcome
	err := workflow.ExecuteActivity(ctx, a.CheckPayout, in.Instruction()).Get(ctx, &o)
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		r.note(o.Status, o.Reason)
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeBankMismatch:
		r.mismatched = err
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeBankRefused: // it had lost it, and refuses it now
		r.note(bank.Failed, "refused by the bank")
	}
}

// settle applies the bank's outcome to the ledger: paid or failed (or returned, which was paid
// first), and returns the payout's status.
func settle(ctx workflow.Context, a *activities.Activities, in PayoutInput, status, reason string) (payout.Status, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, ledgerOptions(0))
	var st payout.Status
	if err := workflow.ExecuteLocalActivity(ctx, a.SettlePayout, in.PayoutID, status != bank.Failed, reason).Get(ctx, &st); err != nil {
		return payout.Processing, err
	}
	setPayoutStatus(ctx, st)
	return st, nil
}

func settleReturn(ctx workflow.Context, a *activities.Activities, in PayoutInput, reason string) (payout.Status, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, ledgerOptions(0))
	var st payout.Status
	if err := workflow.ExecuteLocalActivity(ctx, a.ReturnPayout, in.PayoutID, reason).Get(ctx, &st); err != nil {
		return payout.Paid, err
	}
	setPayoutStatus(ctx, st)
	return st, nil
}

// bankOptions are the instruction's: retried with backoff while the bank does not answer, for
// BankRetryFor; a final no from the bank is not retried.
func bankOptions(ctx workflow.Context, in PayoutInput) workflow.Context {
	retryFor := time.Duration(in.BankRetryFor)
	if retryFor <= 0 {
		retryFor = DefaultBankRetryFor
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: retryFor,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			NonRetryableErrorTypes: []string{activities.ErrTypeBankRefused, activities.ErrTypeBankMismatch},
		},
	})
}

// ledgerOptions are those of a step in the ledger: a local activity retried through technical
// failures for retryFor (DefaultRetryFor when 0).
func ledgerOptions(retryFor activities.Duration) workflow.LocalActivityOptions {
	d := time.Duration(retryFor)
	if d <= 0 {
		d = DefaultRetryFor
	}
	return workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: d,
		StartToCloseTimeout:    10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        50 * time.Millisecond,
			BackoffCoefficient:     2,
			MaximumInterval:        5 * time.Second,
			NonRetryableErrorTypes: []string{activities.ErrTypeInvalidPosting},
		},
	}
}

func setPayoutStatus(ctx workflow.Context, status payout.Status) {
	_ = workflow.UpsertTypedSearchAttributes(ctx, PayoutStatus.ValueSet(string(status)))
}
