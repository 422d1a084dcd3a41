// Package schedules submits scheduled and recurring transfers and runs their occurrences. A
// scheduled transfer is claimed under its idempotency scope and run as the workflow
// scheduled-transfer/<owner>/<key>, which activates it (its 201, stored) and waits on a durable
// timer for each occurrence. Each occurrence is an ordinary transfer (package transfers) under
// the scope of the schedule and the occurrence's number (idempotency.OccurrenceScope): its own
// workflow occurrence/<owner>/<schedule id>/<n>, answer, events and entries, so an occurrence
// fired twice moves money once.
package schedules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
	"github.com/payments/payments/transfers"
	"github.com/payments/payments/workflows"
)

// Service submits scheduled transfers and their occurrences: an instance of the operation
// lifecycle (operation.Runner), whose occurrences are the transfers service's.
type Service struct {
	Runner    *operation.Runner
	Ledger    *ledger.Ledger
	Transfers *transfers.Service
	TTL       time.Duration // how long an answer is replayed
	RetryFor  time.Duration // how long the ledger's steps retry technical failures
	Log       *slog.Logger
}

// Request is a scheduled transfer whose accounts and currency the caller has already checked.
type Request struct {
	Scope       idempotency.Scope
	Fingerprint []byte
	From, To    string
	AmountMinor int64
	Currency    string
	StartAt     time.Time
	Interval    string        // as given; "" for once
	Every       time.Duration // Interval parsed
	Count       *int          // as given
	Description string
	Metadata    map[string]string
}

// Answer is how a submission ended: the answer as stored, or, when its run has not activated it
// after the wait, the scheduled transfer (Pending).
type Answer = operation.Answer[ledger.ScheduledTransfer]

// memoScheduledTransferID names the memo field holding the scheduled transfer a run makes.
const memoScheduledTransferID = "scheduled_transfer_id"

// Submit runs the scheduled transfer once per scope: claims it, starts its run (or finds it),
// and waits for its answer, which the run stores when it activates it. The error, when not nil,
// is idempotency.ErrReused, an *operation.InUseError, an outage, or PostgreSQL's refusal of a
// value. The claim and the start do not follow the client's context.
func (s *Service) Submit(ctx context.Context, r Request) (Answer, error) {
	var in workflows.ScheduledTransferInput
	return operation.SubmitStored(ctx, s.Runner, s.Ledger.DB, s.claim(r, &in), workflows.AnswerUpdate, func() operation.Stored[ledger.ScheduledTransfer] {
		return operation.Stored[ledger.ScheduledTransfer]{Op: s.operation(in), Scope: in.Scope,
			Pending: func(ctx context.Context) (ledger.ScheduledTransfer, error) {
				return s.Ledger.ScheduledTransfer(ctx, "", in.ScheduledTransferID)
			},
			InUse: &operation.InUseError{Kind: operation.KindScheduled, ID: in.ScheduledTransferID, WorkflowID: in.WorkflowID}}
	})
}

// claim claims r's scheduled transfer (in is its run's input once claimed): pending, its row. A
// duplicate runs it as claimed.
func (s *Service) claim(r Request, in *workflows.ScheduledTransferInput) operation.Claim {
	return operation.Claim{Scope: r.Scope, Fingerprint: r.Fingerprint, Uses: ledger.ScheduledTransfersUnder, NewID: r.Scope.ScheduledTransferID,
		Then: operation.RowClaim(func(c operation.Claimed) ledger.ScheduledTransfer {
			st := ledger.ScheduledTransfer{ID: c.ID, OwnerID: r.Scope.OwnerID, FromAccountID: r.From, ToAccountID: r.To,
				AmountMinor: r.AmountMinor, Currency: r.Currency, StartAt: r.StartAt.UTC().Truncate(time.Microsecond),
				Count: r.Count, IntervalMS: r.Every.Milliseconds(), WorkflowID: c.WorkflowID, Description: r.Description,
				Metadata: r.Metadata}
			if r.Interval != "" {
				st.Interval = &r.Interval
			}
			return st
		}, ledger.ClaimedScheduledTransfer, ledger.ErrNotFound, ledger.InsertScheduledTransfer,
			func(st ledger.ScheduledTransfer) { *in = s.input(r.Scope, st) })}
}

// input is the run's input for st, claimed under scope: it starts from the occurrence the
// ledger last started (started again: its transfer is the same), or the first.
func (s *Service) input(scope idempotency.Scope, st ledger.ScheduledTransfer) workflows.ScheduledTransferInput {
	return workflows.ScheduledTransferInput{
		ScheduledTransferID: st.ID, WorkflowID: st.WorkflowID, Scope: scope, ReplayFor: config.Duration(s.TTL),
		FromAccountID: st.FromAccountID, ToAccountID: st.ToAccountID, AmountMinor: st.AmountMinor, Currency: st.Currency,
		StartAt: st.StartAt, Interval: config.Duration(time.Duration(st.IntervalMS) * time.Millisecond), Limit: st.Limit(),
		Next: max(st.Occurrences, 1), Metadata: st.Metadata, RetryFor: config.Duration(s.RetryFor),
	}
}

// operation is in's run: one that completed (the schedule completed or cancelled) is never
// repeated; one that failed may run again, and starts no occurrence twice.
func (s *Service) operation(in workflows.ScheduledTransferInput) operation.Operation {
	return s.Runner.Operation(operation.Run{Kind: operation.KindScheduled, Workflow: workflows.ScheduledTransfer,
		MemoKey: memoScheduledTransferID, ID: in.ScheduledTransferID, Scope: in.Scope, Input: in,
		Attributes: workflows.ScheduledTransferSearchAttributes(in), Summary: workflows.ScheduledTransferSummary(in),
		Memo: workflows.MetadataMemo(in.Metadata)})
}

// Cancel cancels scheduled transfer id of ownerID (the owner of its source account) in the
// ledger, which decides it under the schedule's lock against an occurrence starting, then wakes
// its run to end it. The run is only woken: when it cannot be (Temporal away), the ledger
// refuses its next occurrence. ledger.ErrNotFound for another's or none, ErrScheduleEnded for
// one completed.
func (s *Service) Cancel(ctx context.Context, ownerID, id string) (ledger.ScheduledTransfer, error) {
	st, err := s.Ledger.CancelScheduledTransfer(ctx, ownerID, id)
	if err != nil {
		return st, err
	}
	if err := s.Runner.Client.SignalWorkflow(ctx, st.WorkflowID, "", workflows.CancelSignal, nil); err != nil && s.Log != nil {
		s.Log.WarnContext(ctx, "waking a cancelled scheduled transfer's run failed; its next occurrence ends it", "scheduled_transfer_id", id, "err", err)
	}
	return st, nil
}

// occurrence is what an occurrence's fingerprint covers: which schedule, which number.
type occurrence struct {
	ScheduledTransferID string `json:"scheduled_transfer_id"`
	Occurrence          int    `json:"occurrence"`
}

// SubmitOccurrence submits occurrence n of st as an ordinary transfer under the occurrence's
// scope (idempotency.OccurrenceScope), and says how it stands: completed, rejected (not enough
// funds: the schedule goes on), or pending (its own run finishes it). An occurrence whose
// transfer is final already is answered from the ledger, whatever became of its idempotency
// record. activities.Occurrences.
func (s *Service) SubmitOccurrence(ctx context.Context, st ledger.ScheduledTransfer, n int) (activities.Occurred, error) {
	if t, err := s.Ledger.OccurrenceTransfer(ctx, st.ID, n); err == nil && t.Status.Final() {
		return activities.Occurred{TransferID: t.ID, TransferStatus: t.Status}, nil
	} else if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return activities.Occurred{}, err
	}
	scope := idempotency.OccurrenceScope(st.OwnerID, st.ID, n)
	fp, err := idempotency.Fingerprint(idempotency.RouteOccurrence, occurrence{ScheduledTransferID: st.ID, Occurrence: n})
	if err != nil {
		return activities.Occurred{}, err
	}
	answer, err := s.Transfers.Submit(ctx, transfers.Request{Scope: scope, Fingerprint: fp, From: st.FromAccountID,
		To: st.ToAccountID, AmountMinor: st.AmountMinor, Currency: st.Currency, Description: st.Description,
		Metadata: st.Metadata, ScheduledTransferID: st.ID, Occurrence: n})
	out := activities.Occurred{TransferID: answer.ID, TransferStatus: ledger.TransferPending}
	var inUse *operation.InUseError
	switch {
	case errors.As(err, &inUse) && !inUse.EarlierUse: // its run is going: it finishes the transfer
		return out, nil
	case err != nil:
		return out, err
	case answer.Pending != nil:
		return out, nil
	case answer.Status == http.StatusCreated:
		out.TransferStatus = ledger.TransferCompleted
	default:
		out.TransferStatus = ledger.TransferRejected
	}
	return out, nil
}

// ResolveStale makes sure every scheduled transfer still pending or active olderThan after its
// claim has a run going (operation.ResolveWaiting), so that no occurrence is left unstarted: its
// new run starts from the occurrence the ledger last started, which moves no money twice.
func (s *Service) ResolveStale(ctx context.Context, olderThan time.Duration) (operation.Tally, error) {
	return operation.ResolveWaiting(ctx, s.Runner.Client, s.Ledger.DB, "ScheduledTransfer", openRuns,
		func(f func([]ledger.ScheduledTransfer) error) error {
			return s.Ledger.OpenScheduledTransfers(ctx, olderThan, f)
		},
		func(st ledger.ScheduledTransfer) (string, string, string) {
			return fmt.Sprintf("scheduled transfer %s (%s)", st.ID, st.WorkflowID), st.WorkflowID, st.ID
		},
		func(st ledger.ScheduledTransfer, scope idempotency.Scope) operation.Operation {
			return s.operation(s.input(scope, st))
		})
}

// openRuns admits the scheduled transfer runs still waiting.
var openRuns = fmt.Sprintf("ScheduledTransferStatus IN ('%s', '%s')", ledger.ScheduledPending, ledger.ScheduledActive)

// RerunFailed finds the scheduled transfer workflows whose latest run failed, was terminated or
// timed out, and starts each again from where the ledger stands: it starts no occurrence twice
// and goes on waiting for the next.
func (s *Service) RerunFailed(ctx context.Context, since time.Time, report func(operation.Rerun)) error {
	decode := func(input func(any) error) (operation.Operation, error) {
		var in workflows.ScheduledTransferInput
		if err := input(&in); err != nil {
			return s.operation(in), err
		}
		st, err := ledger.ClaimedScheduledTransfer(ctx, s.Ledger.DB, in.ScheduledTransferID)
		if err == nil {
			in.Next = max(in.Next, st.Occurrences, 1)
		}
		return s.operation(in), err
	}
	return operation.RerunFailed(ctx, s.Runner.Client, s.Runner.Converter, "ScheduledTransfer", since, decode, nil, report)
}
