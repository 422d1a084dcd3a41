package workflows

import (
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/payments/payments/activities"
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
