// Package payout names the states a payout goes through: one type, used by the ledger, the
// workflow that shows them in the Temporal UI (search attribute PayoutStatus), the API and the
// commands.
package payout

// Status is where a payout stands (docs/contract.md §6).
type Status string

const (
	// Processing: accepted; its money is held (or being held); the bank has it, or will.
	Processing Status = "processing"
	// Paid: the bank paid it; the hold became a posting to the bank's settlement account.
	Paid Status = "paid"
	// Failed: refused for insufficient funds, or failed at the bank; its hold, if any, released.
	Failed Status = "failed"
	// Returned: paid, then sent back by the beneficiary's bank; the money is credited back.
	Returned Status = "returned"
)

// In the Temporal UI only, where a payout's run is: what it waits for.
const (
	Holding      Status = "holding"       // holding the money
	Sending      Status = "sending"       // giving the instruction to the bank
	AwaitingBank Status = "awaiting_bank" // waiting for the bank's outcome
	// BankMismatch: the bank holds, under the payout's key, a payment that is not the payout's
	// (another amount, currency, destination or reference). Nothing is settled; the run waits for
	// a person (docs/runbook.md).
	BankMismatch Status = "bank_mismatch"
)
