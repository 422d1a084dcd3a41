package workflows

import (
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/operation"
)

func TestCleanupReturnsWhatThePassDid(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	var a *activities.Activities
	env.RegisterActivity(a)
	env.OnActivity(a.DeleteExpiredRecords, mock.Anything).Return(activities.CleanupResult{Deleted: 3}, nil).Once()
	env.ExecuteWorkflow(IdempotencyCleanup)
	var res activities.CleanupResult
	if err := env.GetWorkflowResult(&res); err != nil || res.Deleted != 3 {
		t.Fatalf("result %+v, %v", res, err)
	}
	env.AssertExpectations(t)
}

// A recovery pass resolves the claims pending for longer than StaleAfter, and passes run every
// RecoveryEvery: together, the bound reconcile holds the ledger to.
func TestRecoveryPassResolvesClaimsPastTheirBound(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	var recovery operation.Recovery
	env.RegisterActivityWithOptions(recovery.ResolveStale, activity.RegisterOptions{Name: RecoveryActivity})
	env.OnActivity(RecoveryActivity, mock.Anything, config.Duration(StaleAfter)).
		Return(operation.Tally{Started: 2, Failed: 1}, nil).Once()
	env.ExecuteWorkflow(RecoverTransfers)
	var res operation.Tally
	if err := env.GetWorkflowResult(&res); err != nil || res.Started != 2 || res.Failed != 1 {
		t.Fatalf("result %+v, %v", res, err)
	}
	env.AssertExpectations(t)
	if StaleAfter+RecoveryEvery != ledger.PendingBound {
		t.Fatalf("a claim may stay pending %s, but reconcile allows %s", StaleAfter+RecoveryEvery, ledger.PendingBound)
	}
}
