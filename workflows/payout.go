package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/ledger"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
)

// PayoutInput is what a payout workflow takes: the payout (its id, derived from the request
// alone, and the scope its first answer is stored under), what to pay where, and how patient to
// be with the bank.
type PayoutInput struct {
	ledger.PayoutHold
	WorkflowID   string
	AccountID    string
	AmountMinor  int64
	Currency     string
	Destination  bank.Destination
	Description  string
	Metadata     map[string]string `json:",omitempty"` // the client's; in the run's memo, never in its search attributes
	RetryFor     config.Duration   // how long holding the money retries technical failures
	BankRetryFor config.Duration   // how long to keep giving the bank the instruction before the run fails
	PollAfter    config.Duration   // how long to wait for the bank's callback before asking it
	ReturnWindow config.Duration   // how long after it is paid a return is still awaited
	// Approval, when set, is when the payout waits for a second key's decision (contract §9):
	// from its claim until it fails.
	Approval *ApprovalWindow `json:",omitempty"`
}

// ApprovalWindow is when a payout waits for approval: from Since (its claim) until Until (its
// approval_due_at), when it fails if nobody has decided; AskedBy is the id of the key that asked
// for it, which may not decide (the UI shows who asked).
type ApprovalWindow struct {
	Since, Until time.Time
	AskedBy      string `json:",omitempty"`
}

// Instruction is what the bank is asked to pay: keyed by the payout id, so that every retry,
// re-run and Reset asks for the same payment.
func (in PayoutInput) Instruction() bank.Instruction {
	return bank.Instruction{Key: in.PayoutID, AmountMinor: in.AmountMinor, Currency: in.Currency,
		Destination: in.Destination, Reference: in.PayoutID}
}

// PayoutOutcome is what a payout workflow returns: the payout and the status it ended in
// (paid, failed, returned), and, apart, the first answer the API gave (201 processing, or 422
// insufficient-funds), whose body shows the payout as it was then.
type PayoutOutcome struct {
	PayoutID    string               `json:"payout_id"`
	Status      ledger.PayoutStatus  `json:"status"`
	FirstAnswer idempotency.Response `json:"first_answer"`
}

// UnmarshalJSON also reads the results of runs that ended before the result had this shape:
// {"Status": …, "Response": <the first answer>}.
func (o *PayoutOutcome) UnmarshalJSON(b []byte) error {
	type plain PayoutOutcome
	var v struct {
		plain
		Response *idempotency.Response `json:"Response"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*o = PayoutOutcome(v.plain)
	if v.Response != nil && o.FirstAnswer.Status == 0 {
		o.FirstAnswer = *v.Response
	}
	return nil
}

// BankEventUpdate is the Update that delivers a bank callback about the payout to its run. Its
// ID is the bank's event id: Temporal applies an Update of one ID once per run, so a callback
// the bank sends twice changes nothing the second time.
const BankEventUpdate = "bank-event"

// ApprovalUpdate is the Update an approval or a rejection is: its argument a ledger.Approval,
// its result the answer stored for it (the payout as it left it, or 422 when it was not waiting
// for approval). The ledger decides; the run carries the decision and goes on once one has won.
const ApprovalUpdate = "approval"

// ErrTypeOtherPayout is a BankEventUpdate (or an AnswerUpdate) refused because it is about
// another payout: the run is another use's of the key.
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
	// DefaultApprovalTimeout is how long a payout waiting for approval waits when its input has
	// no window (its claim always gives it one; a run's input edited by hand may not).
	DefaultApprovalTimeout = 72 * time.Hour
	maxPollInterval        = time.Hour
	returnPollInterval     = 24 * time.Hour
)

// PayoutSearchAttributes are the attributes a payout starts with.
func PayoutSearchAttributes(in PayoutInput) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		PayoutStatus.ValueSet(string(ledger.PayoutHolding)),
		FromAccount.ValueSet(in.AccountID),
		Currency.ValueSet(in.Currency),
		AmountMinor.ValueSet(in.AmountMinor),
	)
}

// PayoutSummary is the one line the Temporal UI shows for a payout: ids, the amount and the
// currency, never the destination (contract §10: a summary is listed, and not encrypted).
func PayoutSummary(in PayoutInput) string {
	s := fmt.Sprintf("payout %s of %s %s minor from %s", in.PayoutID, groupThousands(in.AmountMinor), in.Currency, in.AccountID)
	if in.Approval != nil {
		s += fmt.Sprintf(", approval asked %s", in.Approval.Since.UTC().Format(time.RFC3339))
		if in.Approval.AskedBy != "" {
			s += " by " + in.Approval.AskedBy
		}
		s += ", due by " + in.Approval.Until.UTC().Format(time.RFC3339)
	}
	return s
}

// Payout moves money out through the bank. It holds the money (a local activity, answered at
// once like a transfer's posting: 201 processing, or 422 for insufficient funds), gives the bank
// the instruction (a regular activity, retried while the bank does not answer: a timeout is an
// unknown outcome, and the same key makes one payment), then waits for the bank's outcome: a
// callback delivered as an Update, or, when none comes in time, its own question to the bank.
// Paid: the hold is posted to the settlement account; then a return is awaited for
// ReturnWindow, and credits the money back if it comes. Failed: the hold is released.
//
// A Cancel request (the Temporal UI's "Request Cancellation") is honoured only while the
// instruction cannot have reached the bank, that is before SendPayout is first scheduled: the
// hold is released, the payout fails "cancelled by an operator", and the run ends Canceled.
// From the first attempt on, the bank may have the payment (a timeout is an unknown outcome,
// and the bank has no way to take an instruction back), so only the bank's word ends it: the
// request is refused, in the run's log and its current details in the UI, and the run goes on.
// An operator who must stop it terminates it, and its money stays held until it is run again
// (docs/runbook.md).
func Payout(ctx workflow.Context, in PayoutInput) (PayoutOutcome, error) {
	var a *activities.Activities
	run := &payoutRun{id: in.PayoutID}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, BankEventUpdate, run.receive,
		workflow.UpdateHandlerOptions{Validator: run.validate}); err != nil {
		return PayoutOutcome{}, err
	}
	var first *idempotency.Response
	answerUpdates(ctx, in.PayoutID, ErrTypeOtherPayout, &first)
	if err := run.takeApprovals(ctx, in, func() bool { return first != nil }); err != nil {
		return PayoutOutcome{}, err
	}
	root := ctx
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	run.watchCancellation(root, ctx)
	holdCtx := workflow.WithLocalActivityOptions(ctx, ledgerOptions(in.RetryFor))
	var held activities.Held
	if err := workflow.ExecuteLocalActivity(holdCtx, a.HoldPayout, in.PayoutHold).Get(holdCtx, &held); err != nil {
		return PayoutOutcome{}, err
	}
	first = &held.Response
	out := PayoutOutcome{PayoutID: in.PayoutID, Status: held.Status, FirstAnswer: held.Response}
	run.learn(ctx, held.BankPaymentID)
	status := held.Status
	if status == ledger.PayoutPendingApproval {
		var err error
		if status, err = run.awaitApproval(ctx, root, in); err != nil {
			return out, err
		}
		out.Status = status
		if status == ledger.PayoutFailed && root.Err() != nil { // cancelled while it waited: ends Canceled, as before the bank
			setPayoutStatus(ctx, status)
			workflow.SetCurrentDetails(ctx, "Cancelled by an operator while it waited for approval: the hold is released, the payout failed.")
			return out, temporal.NewCanceledError(ReasonCancelled)
		}
	}
	switch status {
	case ledger.PayoutProcessing:
		if root.Err() != nil && workflow.GetVersion(ctx, cancelChange, workflow.DefaultVersion, 1) == 1 {
			return run.cancel(ctx, a, in, out)
		}
	case ledger.PayoutPaid: // run again after it was paid (its run ended early): its return window still counts
		run.atBank = true
		run.note(bank.Paid, "")
		return awaitAndReturn(ctx, a, in, run, out)
	default: // refused for insufficient funds, rejected, or already failed or returned: nothing more to do
		setPayoutStatus(ctx, status)
		// A caller asking by AnswerUpdate gets the answer before the run closes.
		_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		return out, nil
	}
	return sendAndSettle(ctx, a, in, run, out)
}

// takeApprovals registers ApprovalUpdate, from the start of the run: each approval or rejection,
// once held says the money is held (or refused), is decided by the ledger, which answers those
// that came after another decision or when the payout was not waiting for one.
func (r *payoutRun) takeApprovals(ctx workflow.Context, in PayoutInput, held func() bool) error {
	handler := func(ctx workflow.Context, d ledger.Approval) (idempotency.Response, error) {
		if err := workflow.Await(ctx, held); err != nil {
			return idempotency.Response{}, err
		}
		got, err := r.decide(ctx, in, d)
		return got.Response, err
	}
	validator := func(_ workflow.Context, d ledger.Approval) error {
		if d.PayoutID != in.PayoutID {
			return temporal.NewNonRetryableApplicationError("this run is for "+in.PayoutID+", not "+d.PayoutID, ErrTypeOtherPayout, nil)
		}
		if d.Verdict != ledger.VerdictApprove && d.Verdict != ledger.VerdictReject {
			return temporal.NewNonRetryableApplicationError("a decision is an approval or a rejection, not "+string(d.Verdict), "BadDecision", nil)
		}
		return nil
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, ApprovalUpdate, handler, workflow.UpdateHandlerOptions{Validator: validator})
}

// decide has the ledger decide d (an activity, as an authorization's decisions are: see
// decisionOptions) and notes the payout's status once a decision has ended its wait.
func (r *payoutRun) decide(ctx workflow.Context, in PayoutInput, d ledger.Approval) (activities.Held, error) {
	var a *activities.Activities
	ctx = workflow.WithActivityOptions(ctx, decisionOptions(in.RetryFor))
	var got activities.Held
	err := workflow.ExecuteActivity(ctx, a.DecideApproval, d).Get(ctx, &got)
	if err == nil && got.Status != ledger.PayoutPendingApproval && r.decided == "" {
		r.decided = got.Status
	}
	return got, err
}

// awaitApproval waits, the money held, until a decision ends the payout's wait for approval, its
// window closes, or an operator cancels the run; then, if no decision has won, it has the ledger
// time it out (or cancel it), unless a decision wins first there. It returns where the payout
// stands after: processing (approved: on to the bank) or failed.
func (r *payoutRun) awaitApproval(ctx, root workflow.Context, in PayoutInput) (ledger.PayoutStatus, error) {
	setPayoutStatus(ctx, ledger.PayoutPendingApproval)
	until := workflow.Now(ctx).Add(DefaultApprovalTimeout)
	if in.Approval != nil {
		until = in.Approval.Until
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Waiting for a second key's approval since %s, for %s %s minor; "+
			"fails at %s if nobody decides (POST /v1/payouts/%s/approve or /reject).", in.Approval.Since.UTC().Format(time.RFC3339),
			groupThousands(in.AmountMinor), in.Currency, until.UTC().Format(time.RFC3339), in.PayoutID))
	}
	ended := func() bool { return r.decided != "" || root.Err() != nil }
	if wait := until.Sub(workflow.Now(ctx)); wait > 0 {
		if _, err := workflow.AwaitWithTimeout(ctx, wait, ended); err != nil {
			return "", err
		}
	}
	if r.decided == "" {
		d := ledger.Approval{PayoutID: in.PayoutID, Verdict: ledger.VerdictTimeout, Reason: ledger.NotApprovedReason(until)}
		if root.Err() != nil {
			d.Verdict, d.Reason = ledger.VerdictCancel, ReasonCancelled
		}
		if _, err := r.decide(ctx, in, d); err != nil {
			return "", err
		}
	}
	workflow.SetCurrentDetails(ctx, "")
	return r.decided, nil
}

// sendAndSettle gives the bank the instruction of a payout whose money is held, waits for its
// outcome, and applies it.
func sendAndSettle(ctx workflow.Context, a *activities.Activities, in PayoutInput, run *payoutRun, out PayoutOutcome) (PayoutOutcome, error) {
	run.atBank = true // from here on the bank may have the payment: a Cancel request is refused
	setPayoutStatus(ctx, ledger.PayoutSending)
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
	run.learn(ctx, sent.PaymentID)
	run.note(sent.Status, sent.Reason)

	setPayoutStatus(ctx, ledger.PayoutAwaitingBank)
	if run.awaitOutcome(ctx, a, in); run.mismatched != nil {
		return out, run.mismatch(ctx, run.mismatched)
	}
	// A ledger that cannot take the outcome for RetryFor fails the run, the money still held:
	// rerun failed asks the bank again (same key) and settles it.
	if out.Status, err = settle(ctx, a, in, run.status, run.reason); err != nil || out.Status != ledger.PayoutPaid {
		return out, err
	}
	return awaitAndReturn(ctx, a, in, run, out)
}

// Changes of the Payout workflow, each gated with workflow.GetVersion where the run's commands
// first differ, so that the runs recorded before them replay as they ran.
const (
	// cancelChange: a Cancel request before the instruction is sent fails the payout.
	cancelChange = "cancel-before-the-bank"
	// heldEventsChange: a callback that comes before the run knows its bank payment is held
	// until it does, and applied only if it is about that payment.
	heldEventsChange = "events-wait-for-the-payment-id"
	// lastAskChange: the return window closes only once the bank has answered its last question.
	lastAskChange = "return-window-waits-for-the-bank"
)

// ReasonCancelled is the failure_reason of a payout an operator cancelled before its
// instruction reached the bank.
const ReasonCancelled = "cancelled by an operator"

// watchCancellation hears a Cancel request of the run (root is the run's own context, ctx the
// disconnected one the run works in). Before the instruction is sent, the run itself honours it
// (Payout, after the hold); after, it is refused here, where an operator can see it.
func (r *payoutRun) watchCancellation(root, ctx workflow.Context) {
	workflow.Go(ctx, func(c workflow.Context) {
		root.Done().Receive(c, nil)
		if !r.atBank {
			return
		}
		msg := "Cancellation refused: the bank has, or may have, this payout's instruction, and only its word ends the payout. " +
			"Terminate the run only to stop it by hand (docs/runbook.md); its money stays held until it is run again."
		workflow.GetLogger(c).Warn("cancellation refused: the instruction has reached the bank", "payout_id", r.id)
		workflow.SetCurrentDetails(c, msg)
	})
}

// cancel ends a payout an operator cancelled before its instruction reached the bank: its hold
// released, failed for ReasonCancelled, and the run Canceled.
func (r *payoutRun) cancel(ctx workflow.Context, a *activities.Activities, in PayoutInput, out PayoutOutcome) (PayoutOutcome, error) {
	workflow.GetLogger(ctx).Info("cancelled by an operator before the instruction reached the bank", "payout_id", r.id)
	st, err := settle(ctx, a, in, bank.Failed, ReasonCancelled)
	if err != nil {
		return out, err
	}
	out.Status = st
	workflow.SetCurrentDetails(ctx, "Cancelled by an operator before the instruction reached the bank: the hold is released, the payout failed.")
	return out, temporal.NewCanceledError(ReasonCancelled)
}

// mismatch stops at a bank payment that is not the payout's: nothing can be settled safely, and
// the run stays open, shown as bank_mismatch, until a person has looked (and terminates it).
func (r *payoutRun) mismatch(ctx workflow.Context, err error) error {
	workflow.GetLogger(ctx).Error("the bank's payment is not the payout's", "payout_id", r.id, "error", err)
	setPayoutStatus(ctx, ledger.PayoutBankMismatch)
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
	// paymentID is the bank's payment of the payout, once the bank itself has said so (its
	// answer to the instruction or to a question, checked against the instruction, or the id
	// the ledger recorded from one): until then a callback cannot be told from one about another
	// payment, and waits in held.
	paymentID string
	held      []BankEvent
	answered  bool // the bank answered the run's latest question
	atBank    bool // the instruction is sent, or being sent: a Cancel request is refused
	// decided is the payout's status once a decision ended its wait for approval: processing
	// (approved) or failed.
	decided ledger.PayoutStatus
}

func (r *payoutRun) validate(_ workflow.Context, e BankEvent) error {
	if e.Reference != r.id {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("event %s is about %s, not payout %s", e.ID, e.Reference, r.id),
			ErrTypeOtherPayout, nil)
	}
	switch e.Type {
	case bank.PaymentPaid, bank.PaymentFailed, bank.PaymentReturned:
	default:
		return fmt.Errorf("event %s of type %s is not about a payment", e.ID, e.Type)
	}
	switch {
	case e.PaymentID == "":
		return fmt.Errorf("event %s names no payment", e.ID)
	case r.paymentID != "" && e.PaymentID != r.paymentID:
		return fmt.Errorf("event %s is about payment %s, not the payout's payment %s", e.ID, e.PaymentID, r.paymentID)
	}
	return nil
}

// receive takes a callback the validator let through. One that comes before the bank has told
// the run its payment (the instruction's answer not in yet) is held, not applied: it may be
// about another payment (learn applies it, or drops it, once the run knows).
func (r *payoutRun) receive(ctx workflow.Context, e BankEvent) error {
	if r.paymentID == "" && workflow.GetVersion(ctx, heldEventsChange, workflow.DefaultVersion, 1) == 1 {
		workflow.GetLogger(ctx).Info("callback held until the bank's payment is known", "payout_id", r.id,
			"event_id", e.ID, "payment_id", e.PaymentID)
		r.held = append(r.held, e)
		return nil
	}
	r.apply(e)
	return nil
}

func (r *payoutRun) apply(e BankEvent) {
	switch e.Type {
	case bank.PaymentPaid:
		r.note(bank.Paid, "")
	case bank.PaymentFailed:
		r.note(bank.Failed, e.Reason)
	case bank.PaymentReturned:
		r.note(bank.Returned, e.Reason)
	}
}

// learn takes the bank's payment id of the payout, from the bank itself, and applies the
// callbacks held until then that are about it; those about another payment change nothing
// (reconcile, invariant 8, shows a second payment).
func (r *payoutRun) learn(ctx workflow.Context, paymentID string) {
	if paymentID == "" || r.paymentID != "" {
		return
	}
	r.paymentID = paymentID
	for _, e := range r.held {
		if e.PaymentID == paymentID {
			r.apply(e)
			continue
		}
		workflow.GetLogger(ctx).Warn("callback about another payment than the payout's: dropped", "payout_id", r.id,
			"event_id", e.ID, "payment_id", e.PaymentID, "payout_payment_id", paymentID)
	}
	r.held = nil
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
// the bank itself each time the wait runs out.
func (r *payoutRun) awaitOutcome(ctx workflow.Context, a *activities.Activities, in PayoutInput) {
	r.poll(ctx, a, in, func() bool { return r.mismatched != nil || (r.status != bank.Pending && r.status != "") })
}

// poll waits until done, asking the bank each time the wait runs out: after PollAfter, then
// twice as long each time, up to an hour.
func (r *payoutRun) poll(ctx workflow.Context, a *activities.Activities, in PayoutInput, done func() bool) {
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
//
// The window closes only once the bank has answered its last question. An unanswered question
// at the end (the bank unreachable) has no next time: closing then would leave the ledger paid
// for good while the bank may have returned the money within the window, its callback lost. So
// the run keeps asking, with the same backoff as for the outcome, for as long as the bank does
// not answer, however long: no bound of ours can be right, only the bank's answer ends the
// question (a return the bank makes after that answer is the statement Schedule's:
// CreditBankReturns).
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
	if !returned() && !r.answered && workflow.GetVersion(ctx, lastAskChange, workflow.DefaultVersion, 1) == 1 {
		workflow.GetLogger(ctx).Warn("the bank did not answer the return window's last question; asking until it does",
			"payout_id", r.id)
		r.poll(ctx, a, in, func() bool { return returned() || r.answered })
	}
	return r.status == bank.Returned
}

// ask asks the bank how the payment stands (and gives it the instruction again if it has none);
// an error (the bank unreachable) leaves the question unanswered, for the next time, but a
// payment that is not the payout's stops the run (mismatched).
func (r *payoutRun) ask(ctx workflow.Context, a *activities.Activities, in PayoutInput) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3,
			NonRetryableErrorTypes: []string{activities.ErrTypeBankMismatch, activities.ErrTypeBankRefused}}})
	var o activities.BankOutcome
	err := workflow.ExecuteActivity(ctx, a.CheckPayout, in.Instruction()).Get(ctx, &o)
	var appErr *temporal.ApplicationError
	r.answered = true
	switch {
	case err == nil:
		r.learn(ctx, o.PaymentID)
		r.note(o.Status, o.Reason)
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeBankMismatch:
		r.mismatched = err
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeBankRefused: // it had lost it, and refuses it now
		r.note(bank.Failed, "refused by the bank")
	default:
		r.answered = false
	}
}

// settle applies the bank's outcome to the ledger: paid or failed (or returned, which was paid
// first), and returns the payout's status.
func settle(ctx workflow.Context, a *activities.Activities, in PayoutInput, status, reason string) (ledger.PayoutStatus, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, ledgerOptions(0))
	var st ledger.PayoutStatus
	if err := workflow.ExecuteLocalActivity(ctx, a.SettlePayout, in.PayoutID, status != bank.Failed, reason).Get(ctx, &st); err != nil {
		return ledger.PayoutProcessing, err
	}
	setPayoutStatus(ctx, st)
	return st, nil
}

func settleReturn(ctx workflow.Context, a *activities.Activities, in PayoutInput, reason string) (ledger.PayoutStatus, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, ledgerOptions(0))
	var st ledger.PayoutStatus
	if err := workflow.ExecuteLocalActivity(ctx, a.ReturnPayout, in.PayoutID, reason).Get(ctx, &st); err != nil {
		return ledger.PayoutPaid, err
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
func ledgerOptions(retryFor config.Duration) workflow.LocalActivityOptions {
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

func setPayoutStatus(ctx workflow.Context, status ledger.PayoutStatus) {
	_ = workflow.UpsertTypedSearchAttributes(ctx, PayoutStatus.ValueSet(string(status)))
}
