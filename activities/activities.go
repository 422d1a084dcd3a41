// Package activities holds the workflows' activities: the only workflow code that touches the
// ledger and the bank. Each is safe to run more than once. One file per capability: transfer.go
// (posting a transfer), payout.go (holding a payout's money, the bank's instruction, settling),
// payin.go (crediting a bank credit), authorization.go (holding, capturing,
// voiding and expiring an authorization), scheduled.go (activating a scheduled transfer and
// starting its occurrences), webhook.go (delivering events to clients' endpoints),
// cleanup.go (the idempotency cleanup). The recovery of claims left pending is the services'
// (operation.Recovery), registered beside these by the worker.
package activities

import (
	"context"
	"net/http"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
)

// Activities holds the dependencies of the activities.
type Activities struct {
	Ledger *ledger.Ledger
	// Answer makes the answer stored with a final transfer (api.TransferAnswer), PayoutAnswer
	// the first answer of a payout (api.PayoutAnswer).
	Answer       ledger.Answer
	PayoutAnswer ledger.PayoutAnswer
	// AuthorizationAnswer makes the answers of an authorization and of its decisions.
	AuthorizationAnswer ledger.AuthorizationAnswer
	// ApprovalAnswer makes the answers of the decisions on payouts waiting for approval.
	ApprovalAnswer ledger.ApprovalAnswer
	// Bank is the bank payouts are sent through.
	Bank bank.Rail
	// OnAnswer hears of each answer that commits here (a transfer posted, a payout's funds
	// held); nil when nothing in this process waits for one.
	OnAnswer AnswerHook
	// Webhooks sends webhook deliveries: webhook.Policy.Client, which refuses addresses the
	// policy does not allow at connect time.
	Webhooks *http.Client
	// ScheduledAnswer makes the answer of a scheduled transfer's request; Occurrences submits
	// its occurrences, each an ordinary transfer (schedules.Service).
	ScheduledAnswer ledger.ScheduledAnswer
	Occurrences     Occurrences
}

// Occurrences submits the transfer of an occurrence of a scheduled transfer, once per occurrence
// however often it is asked, and says how it stands.
type Occurrences interface {
	SubmitOccurrence(ctx context.Context, st ledger.ScheduledTransfer, n int) (Occurred, error)
}

// AnswerHook hears of each operation's answer the moment it commits in this process.
// operation.Listener is one: under `payments serve` the API answers from it, instead of a round trip
// through Temporal or PostgreSQL later.
type AnswerHook interface {
	Answered(id string, r idempotency.Response)
}
