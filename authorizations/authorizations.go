// Package authorizations submits authorizations (money held for a payee until it is captured,
// voided or expires) and their payees' decisions on them. An authorization is claimed under its
// idempotency scope and run as the workflow authorization/<owner>/<key>, which holds the money,
// stores the first answer (201 authorized, or 422 insufficient-funds), and waits on its timer and
// on the decisions, each an Update of the run.
package authorizations

import (
	"context"
	"fmt"
	"time"

	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/workflows"
)

// Service submits authorizations: an instance of the operation lifecycle (operation.Runner).
type Service struct {
	Runner   *operation.Runner
	Ledger   *ledger.Ledger
	Answer   ledger.AuthorizationAnswer // the answers stored (api.AuthorizationAnswer)
	TTL      time.Duration              // how long an answer is replayed
	RetryFor time.Duration              // how long the ledger's steps retry technical failures
}

// Request is an authorization whose accounts and currency the caller has already checked.
type Request struct {
	Scope       idempotency.Scope
	Fingerprint []byte
	From, To    string
	AmountMinor int64
	Currency    string
	ExpiresIn   time.Duration
	Description string
	Metadata    map[string]string
}

// Answer is how a submission ended: the first answer as stored, or, when the money is not held
// yet after the wait, the authorization (Pending).
type Answer = operation.Answer[ledger.Authorization]

// memoAuthorizationID names the memo field holding the authorization a run makes.
const memoAuthorizationID = "authorization_id"

// Submit runs the authorization once per scope: claims it, starts its run (or finds it), and
// waits for its first answer, which the run stores when it holds the money, as a payout's does.
// The error, when not nil, is idempotency.ErrReused, an *operation.InUseError, an outage, or
// PostgreSQL's refusal of a value. The claim and the start do not follow the client's context.
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	var in workflows.AuthorizationInput
	return operation.SubmitStored(ctx, s.Runner, s.Ledger.DB, s.claim(r, &in), workflows.AnswerUpdate, func() operation.Stored[ledger.Authorization] {
		return operation.Stored[ledger.Authorization]{Op: s.operation(in), Scope: in.Scope,
			Pending: func(ctx context.Context) (ledger.Authorization, error) {
				return s.Ledger.Authorization(ctx, "", in.AuthorizationID)
			},
			InUse: &operation.InUseError{Kind: operation.KindAuthorization, ID: in.AuthorizationID, WorkflowID: in.WorkflowID}}
	})
}

// claim claims r's authorization (in is its run's input once claimed): the authorization,
// pending, is its row. A duplicate runs it as claimed: its expiry is the row's.
func (s *Service) claim(r Request, in *workflows.AuthorizationInput) operation.Claim {
	return operation.Claim{Scope: r.Scope, Fingerprint: r.Fingerprint, Uses: ledger.AuthorizationsUnder, NewID: r.Scope.AuthorizationID,
		Then: operation.RowClaim(func(c operation.Claimed) ledger.Authorization {
			return ledger.Authorization{ID: c.ID, FromAccountID: r.From, ToAccountID: r.To, AmountMinor: r.AmountMinor,
				Currency: r.Currency, ExpiresAt: time.Now().UTC().Add(r.ExpiresIn).Truncate(time.Microsecond),
				WorkflowID: c.WorkflowID, Description: r.Description, Metadata: r.Metadata}
		}, ledger.ClaimedAuthorization, ledger.ErrNotFound, ledger.InsertAuthorization,
			func(au ledger.Authorization) { *in = s.input(r.Scope, au) })}
}

func (s *Service) input(scope idempotency.Scope, au ledger.Authorization) workflows.AuthorizationInput {
	return workflows.AuthorizationInput{
		Decision: ledger.Decision{AuthorizationID: au.ID, Action: ledger.ActionAuthorize, Scope: scope,
			ReplayFor: config.Duration(s.TTL)},
		WorkflowID: au.WorkflowID, FromAccountID: au.FromAccountID, ToAccountID: au.ToAccountID,
		AmountMinor: au.AmountMinor, Currency: au.Currency, ExpiresAt: au.ExpiresAt, Metadata: au.Metadata,
		RetryFor: config.Duration(s.RetryFor),
	}
}

// operation is in's run: one that completed (captured, voided, expired, rejected) is never
// repeated; one that failed may run again, and holds nothing twice.
func (s *Service) operation(in workflows.AuthorizationInput) operation.Operation {
	return s.Runner.Operation(operation.Run{Kind: operation.KindAuthorization, Workflow: workflows.Authorization,
		MemoKey: memoAuthorizationID, ID: in.AuthorizationID, Scope: in.Scope, Input: in,
		Attributes: workflows.AuthorizationSearchAttributes(in), Summary: workflows.AuthorizationSummary(in),
		Memo: workflows.MetadataMemo(in.Metadata)})
}

// Decide captures or voids authorization au (as d says, under d's scope) for its payee: an Update
// of its run, decided by the ledger; once the run has closed, the ledger answers directly (the
// authorization has ended: 422). The answer is stored under d's scope either way.
func (s *Service) Decide(ctx context.Context, au ledger.Authorization, d ledger.Decision, fingerprint []byte) (idempotency.Response, bool, error) {
	d.AuthorizationID, d.ReplayFor = au.ID, config.Duration(s.TTL)
	return s.Runner.Decide(ctx, operation.Decision{
		Scope: d.Scope, Fingerprint: fingerprint, Kind: operation.KindAuthorization, ID: au.ID, WorkflowID: au.WorkflowID,
		Update: workflows.DecideUpdate, Arg: d, OtherRun: workflows.ErrTypeOtherAuthorization,
		Closed: func(ctx context.Context) (idempotency.Response, error) {
			_, resp, err := s.Ledger.Decide(ctx, d, s.Answer)
			return resp, err
		},
	})
}

// ResolveStale makes sure every authorization still pending or authorized olderThan after its
// claim has a run going (operation.ResolveWaiting), so that no money stays held past its expiry:
// its new run holds nothing twice and expires it on time, or at once when its time has passed.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (operation.Tally, error) {
	return operation.ResolveWaiting(ctx, s.Runner.Client, s.Ledger.DB, "Authorization", openRuns,
		func(f func([]ledger.Authorization) error) error {
			return s.Ledger.OpenAuthorizations(ctx, olderThan, f)
		},
		func(au ledger.Authorization) (string, string, string) {
			return fmt.Sprintf("authorization %s (%s)", au.ID, au.WorkflowID), au.WorkflowID, au.ID
		},
		func(au ledger.Authorization, scope idempotency.Scope) operation.Operation {
			return s.operation(s.input(scope, au))
		})
}

// openRuns admits the authorization runs still holding or waiting.
var openRuns = fmt.Sprintf("AuthorizationStatus IN ('%s', '%s')", ledger.AuthorizationPending, ledger.AuthorizationAuthorized)

// RerunFailed finds the authorization workflows whose latest run failed, was terminated or
// timed out, and starts each again with the same input: it holds nothing twice and goes on
// waiting for a decision or its expiry.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	decode := func(input func(any) error) (operation.Operation, error) {
		var in workflows.AuthorizationInput
		err := input(&in)
		return s.operation(in), err
	}
	return operation.RerunFailed(ctx, s.Runner.Client, s.Runner.Converter, "Authorization", since, decode, nil, report)
}
