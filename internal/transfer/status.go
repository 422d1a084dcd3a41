// Package transfer names the states a transfer goes through: one type, used by the ledger that
// stores them, the workflow that shows them in the Temporal UI (search attribute TransferStatus),
// the API that answers with them and the commands that report them.
package transfer

// Status is where a transfer stands.
type Status string

const (
	// Pending: claimed, not yet posted. Its workflow is starting, waiting for a worker, or
	// retrying the posting.
	Pending Status = "pending"
	// Posting: only in the Temporal UI. The ledger transaction has been running for a while,
	// waiting on PostgreSQL or on an account's lock.
	Posting Status = "posting"
	// Completed: posted; the money moved. Final.
	Completed Status = "completed"
	// Rejected: not enough funds; no money moved. Final, like Completed.
	Rejected Status = "rejected"
	// Failed: its run gave up (retries spent, terminated, timed out); no money moved. Not final:
	// a new run of the same workflow ID may still post it.
	Failed Status = "failed"
)

// Final reports whether s will never change again.
func (s Status) Final() bool { return s == Completed || s == Rejected }
