// Package app assembles the payment processor from its parts, in one place for the payments
// command and the tests alike: the ledger, the transfers service, the worker with its
// activities, and the HTTP API, wired to one database and one Temporal client.
package app

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/api"
	"github.com/payments/payments/authorizations"
	"github.com/payments/payments/deliveries"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/internal/webhook"
	"github.com/payments/payments/payins"
	"github.com/payments/payments/payouts"
	"github.com/payments/payments/schedules"
	"github.com/payments/payments/transfers"
	"github.com/payments/payments/worker"
	"github.com/payments/payments/workflows"
)

// Settings are the knobs of the configuration that shape the parts (README, "Configuration").
type Settings struct {
	SyncWait time.Duration // PAYMENTS_SYNC_WAIT
	TTL      time.Duration // PAYMENTS_IDEMPOTENCY_TTL
	RetryFor time.Duration // PAYMENTS_TRANSFER_RETRY_FOR
	Bank     config.Bank
	Webhooks config.Webhooks
	// Approvals: which payouts wait for a second key, and how long (contract §9).
	Approvals config.Approvals
	// Keys (PAYMENTS_CODEC_KEYS) seal the secrets the ledger keeps (ledger.Ledger.Keys).
	Keys *keyring.Ring
	// RateLimit is PAYMENTS_RATE_LIMIT, requests a second per API key; 0 limits nothing (the
	// in-process harnesses of the tests, which send far more on one key).
	RateLimit float64
	// Converter is the Temporal client's data converter (the payload codec's): what the
	// services read of runs (memos, inputs to rerun) is read with it.
	Converter converter.DataConverter
}

// App is the system's parts on one database and one Temporal client.
type App struct {
	Ledger         *ledger.Ledger
	Temporal       client.Client
	Transfers      *transfers.Service
	Payouts        *payouts.Service
	Payins         *payins.Service
	Webhooks       *deliveries.Service
	Authorizations *authorizations.Service
	Schedules      *schedules.Service
	Bank           bank.Rail
	settings       Settings
	log            *slog.Logger
	listener       *operation.Listener
}

// New assembles the parts on db and c. listener, when not nil, is shared by a worker and an API
// running in this process on c (`payments serve`): the API then starts workflows eagerly on
// that worker and answers as soon as their posting commits here. Pass nil otherwise.
func New(db *pgxpool.Pool, c client.Client, s Settings, log *slog.Logger, listener *operation.Listener) *App {
	if s.Webhooks.Timeout <= 0 {
		s.Webhooks.Timeout = 10 * time.Second
	}
	l := &ledger.Ledger{DB: db, Keys: s.Keys}
	hooks := &deliveries.Service{Ledger: l, Temporal: c, Converter: s.Converter, RetryFor: s.Webhooks.RetryFor, Log: log}
	l.Wake = hooks.Wake
	runner := &operation.Runner{Client: c, Converter: s.Converter, Claims: l, TaskQueue: workflows.TaskQueue, SyncWait: s.SyncWait,
		Eager: listener != nil, Listener: listener}
	xfers := &transfers.Service{Runner: runner, Ledger: l, Answer: api.TransferAnswer, TTL: s.TTL, RetryFor: s.RetryFor}
	return &App{
		Ledger: l, Temporal: c, settings: s, log: log, listener: listener,
		Transfers: xfers,
		Schedules: &schedules.Service{Runner: runner, Ledger: l, Transfers: xfers, TTL: s.TTL, RetryFor: s.RetryFor, Log: log},
		Payouts: &payouts.Service{Runner: runner, Ledger: l, TTL: s.TTL, RetryFor: s.RetryFor,
			BankRetryFor: s.Bank.RetryFor, PollAfter: s.Bank.PollAfter, ReturnWindow: s.Bank.ReturnWindow,
			Approvals: s.Approvals, Answer: api.ApprovalAnswer},
		Authorizations: &authorizations.Service{Runner: runner, Ledger: l, Answer: api.AuthorizationAnswer, TTL: s.TTL, RetryFor: s.RetryFor},
		Payins:         &payins.Service{Temporal: c, Converter: s.Converter, RetryFor: s.RetryFor},
		Webhooks:       hooks,
		Bank:           &bank.HTTP{BaseURL: s.Bank.URL},
	}
}

// Worker returns a worker for the task queue with every workflow and activity registered; the
// caller starts and stops it.
func (a *App) Worker() sdkworker.Worker {
	acts := &activities.Activities{Ledger: a.Ledger, Answer: api.TransferAnswer, PayoutAnswer: api.PayoutAnswer,
		AuthorizationAnswer: api.AuthorizationAnswer, ApprovalAnswer: api.ApprovalAnswer,
		Bank: a.Bank, Webhooks: a.policy().Client(a.settings.Webhooks.Timeout),
		ScheduledAnswer: api.ScheduledTransferAnswer, Occurrences: a.Schedules}
	if a.listener != nil {
		acts.OnAnswer = a.listener
	}
	// The recovery pass: the transfers, the payouts, the authorizations and the scheduled
	// transfers left pending, and the webhook endpoints behind.
	return worker.New(a.Temporal, acts, operation.Recovery{a.Transfers, a.Payouts, a.Authorizations, a.Schedules, a.Webhooks})
}

// Server returns the HTTP API.
func (a *App) Server() *api.Server {
	return &api.Server{DB: a.Ledger.DB, Ledger: a.Ledger, Transfers: a.Transfers, Payouts: a.Payouts, Payins: a.Payins,
		Authorizations: a.Authorizations, Schedules: a.Schedules,
		Webhooks: a.Webhooks, WebhookURLs: a.policy(), Temporal: a.Temporal, BankSecret: []byte(a.settings.Bank.Secret), TTL: a.settings.TTL, Log: a.log,
		Limits: &api.RateLimits{PerSecond: a.settings.RateLimit}}
}

// policy is where webhooks may be sent (PAYMENTS_WEBHOOK_ALLOW_INSECURE).
func (a *App) policy() webhook.Policy {
	return webhook.Policy{AllowInsecure: a.settings.Webhooks.AllowInsecure, LoopbackOnly: a.settings.Webhooks.LoopbackOnly}
}
