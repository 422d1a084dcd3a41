// Package activities holds the workflows' activities: the only workflow code that touches the
// ledger. Each is safe to run more than once. One file per capability: transfer.go (posting a
// transfer), cleanup.go (the idempotency cleanup and the recovery of pending transfers).
package activities

import "github.com/payments/payments/internal/ledger"

// Activities holds the dependencies of the activities.
type Activities struct {
	Ledger *ledger.Ledger
	// Answer makes the answer stored with a final transfer (api.TransferAnswer).
	Answer ledger.Answer
	// OnPosted hears of each posting that commits here; nil when nothing in this process waits
	// for one.
	OnPosted PostedHook
	// Stale resolves transfers left pending (transfers.Service.ResolveStale).
	Stale StaleResolver
}
