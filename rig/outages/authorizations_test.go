package outages

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/rig/testenv"
)

// TestAuthorizationExpiresAfterItsWorkerReturns: the only worker is killed while an
// authorization waits, and stays away past its expiry. Its timer is Temporal's, not the
// worker's: when a worker returns, the authorization expires at once (its hold released), and
// a capture after that is refused.
func TestAuthorizationExpiresAfterItsWorkerReturns(t *testing.T) {
	env := testenv.New(t, "payments_test_faults_authorization", testenv.Options{NoWorker: true})
	first := env.Process(t, testenv.BuildPayments(t), env.TemporalAddr(), []string{"worker"}, "DATABASE_URL="+env.URL)
	_, alice := env.Owner(t)
	_, bob := env.Owner(t)
	from, to := env.Account(t, alice, "USD"), env.Account(t, bob, "USD")
	env.Fund(t, from, 500)
	r := env.Do(t, "POST", "/v1/authorizations", alice, "kept",
		fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":400,"currency":"USD","expires_in":"3s"}`, from, to))
	if r.Status != http.StatusCreated {
		t.Fatalf("authorize: %d %s", r.Status, r.Body)
	}
	au := r.JSON(t)
	id, workflowID := au["id"].(string), au["workflow_id"].(string)
	expiresAt, _ := time.Parse(time.RFC3339Nano, au["expires_at"].(string))
	held := func() int { return env.Count(t, `SELECT held_minor FROM accounts WHERE id = $1`, from) }
	if held() != 400 {
		t.Fatalf("held %d after the authorization, want 400", held())
	}

	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(expiresAt) + 2*time.Second)
	if held() != 400 || env.Count(t, `SELECT count(*) FROM authorizations WHERE id = $1 AND status = 'authorized'`, id) != 1 {
		t.Fatal("the authorization ended while no worker ran")
	}

	back := time.Now()
	second := env.NewWorker(nil)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	if env.Settled(t, workflowID) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the authorization's run did not complete")
	}
	var expiredAt time.Time
	if err := env.DB.QueryRow(t.Context(), `SELECT expired_at FROM authorizations WHERE id = $1 AND status = 'expired'`, id).Scan(&expiredAt); err != nil {
		t.Fatalf("the authorization did not expire: %v", err)
	}
	if expiredAt.Before(expiresAt) || expiredAt.Sub(back) > 10*time.Second {
		t.Fatalf("expired at %v: due %v, the worker back at %v", expiredAt, expiresAt, back)
	}
	if held() != 0 || env.Balance(t, from) != 500 || env.Balance(t, to) != 0 {
		t.Fatalf("after the expiry: held %d, balances %d/%d", held(), env.Balance(t, from), env.Balance(t, to))
	}
	late := env.Do(t, "POST", "/v1/authorizations/"+id+"/capture", bob, "late", "")
	if late.Status != http.StatusUnprocessableEntity || late.JSON(t)["authorization_status"] != "expired" {
		t.Fatalf("capture after the expiry: %d %s", late.Status, late.Body)
	}
	env.Reconcile(t)
}
