// Package workflows holds the workflows: deterministic orchestration only, no I/O. One file per
// capability, each with what its workflow takes and returns: transfer.go (a transfer, posted
// once), payout.go and payin.go (money out and in through the bank), authorization.go (money
// held until it is captured, voided or expires), scheduled.go (transfers on a timer, each
// occurrence an ordinary transfer), webhook.go (events
// delivered to clients' endpoints), and the recurring Schedules: cleanup.go and recover.go (the
// idempotency records and the pending transfers kept in bounds), statement.go (returns found on
// the bank's statement credited back).
package workflows

import "go.temporal.io/api/enums/v1"

// TaskQueue is the queue every workflow and activity runs on. Its name is older than the
// payouts, payins and webhooks it also serves, and stays: a running workflow's tasks wait on the
// queue it started on, so a new name would strand every run in flight (ADR 0011).
const TaskQueue = "payments-transfers"

// SearchAttributeTypes are the custom search attributes the workflows carry, which the
// namespace must have registered: `make run` registers them on the dev server, and a worker
// refuses to start without them.
var SearchAttributeTypes = map[string]enums.IndexedValueType{
	TransferStatus.GetName():          enums.INDEXED_VALUE_TYPE_KEYWORD,
	FromAccount.GetName():             enums.INDEXED_VALUE_TYPE_KEYWORD,
	ToAccount.GetName():               enums.INDEXED_VALUE_TYPE_KEYWORD,
	Currency.GetName():                enums.INDEXED_VALUE_TYPE_KEYWORD,
	AmountMinor.GetName():             enums.INDEXED_VALUE_TYPE_INT,
	PayoutStatus.GetName():            enums.INDEXED_VALUE_TYPE_KEYWORD,
	WebhookEndpoint.GetName():         enums.INDEXED_VALUE_TYPE_KEYWORD,
	WebhookEventType.GetName():        enums.INDEXED_VALUE_TYPE_KEYWORD,
	WebhookStatus.GetName():           enums.INDEXED_VALUE_TYPE_INT,
	AuthorizationStatus.GetName():     enums.INDEXED_VALUE_TYPE_KEYWORD,
	ScheduledTransferStatus.GetName(): enums.INDEXED_VALUE_TYPE_KEYWORD,
}
