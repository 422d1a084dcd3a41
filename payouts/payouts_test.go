package payouts_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/payments/payments/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(context.Background(), "payments_test_payouts", testenv.Options{Bank: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "test environment:", err)
		os.Exit(1)
	}
	os.Exit(testenv.Run(m, env))
}

func TestSmoke(t *testing.T) {
	_, key := env.Owner(t)
	acc := env.Account(t, key, "USD")
	env.Fund(t, acc, 1_000)
	r := env.Do(t, "POST", "/v1/payouts", key, "p1", fmt.Sprintf(`{"account_id":%q,"amount_minor":300,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}`, acc))
	if r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	t.Logf("%s", r.Body)
	id := r.JSON(t)["id"].(string)
	testenv.WaitFor(t, "paid", func() bool {
		g := env.Do(t, "GET", "/v1/payouts/"+id, key, "", "")
		return g.JSON(t)["status"] == "paid"
	})
	a := env.Do(t, "GET", "/v1/accounts/"+acc, key, "", "")
	t.Logf("%s", a.Body)
	env.Reconcile(t)
}
