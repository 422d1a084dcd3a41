package ledger

// The states a transfer and a payout go through: one type each, used by the ledger that stores
// them, the workflows that show them in the Temporal UI (search attributes TransferStatus and
// PayoutStatus), the API that answers with them and the commands that report them.

// TransferStatus is where a transfer (or a refund) stands.
type TransferStatus string

const (
	// TransferPending: claimed, not yet posted. Its workflow is starting, waiting for a worker,
	// or retrying the posting.
	TransferPending TransferStatus = "pending"
	// TransferPosting: only in the Temporal UI. The ledger transaction has been running for a
	// while, waiting on PostgreSQL or on an account's lock.
	TransferPosting TransferStatus = "posting"
	// TransferCompleted: posted; the money moved. Final.
	TransferCompleted TransferStatus = "completed"
	// TransferRejected: not enough funds; no money moved. Final, like TransferCompleted.
	TransferRejected TransferStatus = "rejected"
	// TransferFailed: its run gave up (retries spent, terminated, timed out); no money moved.
	// Not final: a new run of the same workflow ID may still post it.
	TransferFailed TransferStatus = "failed"
)

// Final reports whether s will never change again.
func (s TransferStatus) Final() bool { return s == TransferCompleted || s == TransferRejected }

// PayoutStatus is where a payout stands (docs/contract.md §6).
type PayoutStatus string

const (
	// PayoutProcessing: accepted; its money is held (or being held); the bank has it, or will.
	PayoutProcessing PayoutStatus = "processing"
	// PayoutPendingApproval: at or above the approval threshold; its money is held, and it goes
	// no further until a second key approves it (then processing) or rejects it, or its
	// approval_due_at passes (then failed, the hold released).
	PayoutPendingApproval PayoutStatus = "pending_approval"
	// PayoutPaid: the bank paid it; the hold became a posting to the bank's settlement account.
	PayoutPaid PayoutStatus = "paid"
	// PayoutFailed: refused for insufficient funds, or failed at the bank; its hold, if any,
	// released.
	PayoutFailed PayoutStatus = "failed"
	// PayoutReturned: paid, then sent back by the beneficiary's bank; the money is credited back.
	PayoutReturned PayoutStatus = "returned"
)

// In the Temporal UI only, where a payout's run is: what it waits for.
const (
	PayoutHolding      PayoutStatus = "holding"       // holding the money
	PayoutSending      PayoutStatus = "sending"       // giving the instruction to the bank
	PayoutAwaitingBank PayoutStatus = "awaiting_bank" // waiting for the bank's outcome
	// PayoutBankMismatch: the bank holds, under the payout's key, a payment that is not the
	// payout's (another amount, currency, destination or reference). Nothing is settled; the run
	// waits for a person (docs/runbook.md).
	PayoutBankMismatch PayoutStatus = "bank_mismatch"
)

// AuthorizationStatus is where an authorization stands (docs/contract.md §9).
type AuthorizationStatus string

const (
	// AuthorizationPending: claimed, its money not held yet.
	AuthorizationPending AuthorizationStatus = "pending"
	// AuthorizationAuthorized: its money is held on the source, until a capture, a void or
	// its expiry, whichever the ledger takes first.
	AuthorizationAuthorized AuthorizationStatus = "authorized"
	// AuthorizationCaptured: the captured amount moved to the destination, the rest released.
	AuthorizationCaptured AuthorizationStatus = "captured"
	// AuthorizationVoided: the payee released the hold.
	AuthorizationVoided AuthorizationStatus = "voided"
	// AuthorizationExpired: its timer released the hold at expires_at.
	AuthorizationExpired AuthorizationStatus = "expired"
	// AuthorizationRejected: not enough available when it was asked; nothing held.
	AuthorizationRejected AuthorizationStatus = "rejected"
)

// Ended reports whether s is an end: nothing is held and nothing more can happen.
func (s AuthorizationStatus) Ended() bool {
	return s != AuthorizationPending && s != AuthorizationAuthorized
}

// ScheduledTransferStatus is where a scheduled transfer stands (docs/contract.md §9).
type ScheduledTransferStatus string

const (
	// ScheduledPending: claimed, its run not yet started (or not yet answered).
	ScheduledPending ScheduledTransferStatus = "pending"
	// ScheduledActive: its run waits on its timer for the next occurrence.
	ScheduledActive ScheduledTransferStatus = "active"
	// ScheduledCompleted: its last occurrence has started (each occurrence is a transfer with a
	// status of its own). Final.
	ScheduledCompleted ScheduledTransferStatus = "completed"
	// ScheduledCancelled: cancelled by its owner; no occurrence starts after it. Final.
	ScheduledCancelled ScheduledTransferStatus = "cancelled"
)
