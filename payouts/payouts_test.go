package payouts_test

// End-to-end tests of payouts and payins (docs/contract.md §6) on real parts: PostgreSQL, a
// Temporal dev server, a worker and the HTTP API (testenv), and the bank simulator as a process
// of its own. lifecycle_test.go: a payout's life through the API; bank_faults_test.go: the bank
// and the processor misbehaving; callbacks_test.go: the bank's callbacks and payins;
// workflow_test.go: the payout workflow in simulated time; helpers_test.go: what they share.

import (
	"testing"

	"github.com/payments/payments/rig/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, "payments_test_payouts", testenv.Options{Bank: true})
}
