package operation

import (
	"testing"

	"go.temporal.io/api/enums/v1"
)

// The recovery pass leaves an operation (a payout, an authorization) whose run an operator
// terminated to them, and starts again one whose run closed any other way: a payout still
// processing after its run ended Canceled
// (a build before cancel-before-the-bank let a cancel end the run without releasing its hold)
// would otherwise hold its money for ever, since `payments rerun failed` does not take canceled
// runs (docs/contract.md).
func TestRecoveryStartsAgainEveryClosedRunButATerminatedOne(t *testing.T) {
	for status, want := range map[enums.WorkflowExecutionStatus]Outcome{
		enums.WORKFLOW_EXECUTION_STATUS_TERMINATED: Stopped,
		enums.WORKFLOW_EXECUTION_STATUS_CANCELED:   "",
		enums.WORKFLOW_EXECUTION_STATUS_FAILED:     "",
		enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:  "",
		enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:  "",
	} {
		if got, _ := UnlessTerminated(Classified{Standing: Closed, Status: status}); got != want {
			t.Errorf("a payout still processing after its run closed %v: %q, want %q", status, got, want)
		}
	}
}
