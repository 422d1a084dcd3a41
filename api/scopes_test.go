package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/rig/testenv"
)

// keysOf issues one key per scope set for one new owner: its name and the keys, in order.
func keysOf(t *testing.T, sets ...[]auth.Scope) (string, []string) {
	t.Helper()
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	keys := make([]string, len(sets))
	for i, scopes := range sets {
		keys[i] = keyOf(t, name, scopes...)
	}
	return name, keys
}

// keyOf issues a key with scopes to the owner called name.
func keyOf(t *testing.T, name string, scopes ...auth.Scope) string {
	t.Helper()
	key, _, err := auth.CreateKey(context.Background(), env.DB, name, scopes...)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// allBut is every scope but s.
func allBut(s auth.Scope) []auth.Scope {
	return slices.DeleteFunc(slices.Clone(auth.Scopes), func(x auth.Scope) bool { return x == s })
}

// Every route needs its scope (contract §10): a key of the owner without it is 403
// insufficient-scope whether the owner's resource exists or not (the answers are the same
// bytes), and nothing is done or stored: the same Idempotency-Key then goes through, as a first
// answer, with the owner's key that has the scope.
func TestEachRouteNeedsItsScope(t *testing.T) {
	name, keys := keysOf(t, auth.Scopes)
	full := keys[0]
	from, to := env.Account(t, full, "USD"), env.Account(t, full, "USD")
	env.Fund(t, from, 1_000)
	paid := env.Do(t, "POST", "/v1/transfers", full, t.Name()+"-paid", testenv.TransferBody(from, to, 100))
	if paid.Status != http.StatusCreated {
		t.Fatalf("transfer: %d %s", paid.Status, paid.Body)
	}
	transfer := paid.JSON(t)["id"].(string)
	payout := fmt.Sprintf(`{"account_id":%q,"amount_minor":50,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}`, from)
	scheduled := fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":3,"currency":"USD","start_at":%q}`,
		from, to, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	routes := []struct {
		method, path, missing, body string
		scope                       auth.Scope
	}{
		{"POST", "/v1/accounts", "", `{"currency":"USD"}`, auth.ScopeAccounts},
		{"GET", "/v1/accounts", "", "", auth.ScopeRead},
		{"GET", "/v1/accounts/" + from, "/v1/accounts/acc_missing", "", auth.ScopeRead},
		{"GET", "/v1/accounts/" + from + "/entries", "/v1/accounts/acc_missing/entries", "", auth.ScopeRead},
		{"POST", "/v1/transfers", "", testenv.TransferBody(from, to, 7), auth.ScopeTransfers},
		{"GET", "/v1/transfers", "", "", auth.ScopeRead},
		{"GET", "/v1/transfers/" + transfer, "/v1/transfers/tr_missing", "", auth.ScopeRead},
		{"POST", "/v1/transfers/" + transfer + "/refunds", "/v1/transfers/tr_missing/refunds", `{"amount_minor":5}`, auth.ScopeTransfers},
		{"GET", "/v1/refunds/rf_missing", "", "", auth.ScopeRead},
		{"POST", "/v1/payouts", "", payout, auth.ScopePayouts},
		{"GET", "/v1/payouts", "", "", auth.ScopeRead},
		{"GET", "/v1/payouts/po_missing", "", "", auth.ScopeRead},
		{"GET", "/v1/events", "", "", auth.ScopeRead},
		{"POST", "/v1/webhook-endpoints", "", `{"url":"http://127.0.0.1:9/h","event_types":["*"]}`, auth.ScopeWebhooks},
		{"GET", "/v1/webhook-endpoints", "", "", auth.ScopeRead},
		{"DELETE", "/v1/webhook-endpoints/we_missing", "", "", auth.ScopeWebhooks},
		{"POST", "/v1/scheduled-transfers", "", scheduled, auth.ScopeTransfers},
		{"GET", "/v1/scheduled-transfers", "", "", auth.ScopeRead},
		{"GET", "/v1/scheduled-transfers/st_missing", "", "", auth.ScopeRead},
		{"DELETE", "/v1/scheduled-transfers/st_missing", "", "", auth.ScopeTransfers},
	}
	for _, r := range routes {
		lacking := []string{keyOf(t, name, allBut(r.scope)...)}
		idem := ""
		if r.method == "POST" {
			idem = fmt.Sprintf("%s-%s-%s", t.Name(), r.scope, strings.ReplaceAll(r.path, "/", "_"))
		}
		refused := env.Do(t, r.method, r.path, lacking[0], idem, r.body)
		if refused.Status != http.StatusForbidden || testenv.ProblemType(t, refused) != "insufficient-scope" ||
			!strings.Contains(refused.JSON(t)["detail"].(string), string(r.scope)) {
			t.Errorf("%s %s without %s: %d %s, want 403 insufficient-scope naming it", r.method, r.path, r.scope, refused.Status, refused.Body)
			continue
		}
		if r.missing != "" {
			if other := env.Do(t, r.method, r.missing, lacking[0], idem, r.body); other.Status != refused.Status || string(other.Body) != string(refused.Body) {
				t.Errorf("%s: the 403 for a missing resource differs: %d %s against %s", r.missing, other.Status, other.Body, refused.Body)
			}
		}
		// The owner of the refused key sees nothing new, and the key it used is still unused.
		if r.method == "POST" {
			again := env.Do(t, r.method, r.path, full, idem, r.body)
			if again.Header.Get("Idempotent-Replayed") != "" || again.Status == http.StatusForbidden {
				t.Errorf("%s %s after a 403: %d %s replayed=%q, want a first answer", r.method, r.path, again.Status, again.Body, again.Header.Get("Idempotent-Replayed"))
			}
		}
	}
	// The ledger, by the test's own model: 1,000 in, 100 and then 7 to the other account, 5 of
	// it refunded; one payout of 50, held or (no bank answers here) failed and released.
	if got := env.Balance(t, to); got != 100+7-5 {
		t.Errorf("destination %d, want %d", got, 100+7-5)
	}
	if got := env.Balance(t, from); got != 1_000-100-7+5-50 && got != 1_000-100-7+5 {
		t.Errorf("source %d, want %d or %d", got, 1_000-100-7+5-50, 1_000-100-7+5)
	}
	if payouts := env.Do(t, "GET", "/v1/payouts", full, "", "").JSON(t)["data"].([]any); len(payouts) != 1 {
		t.Errorf("%d payouts, want 1", len(payouts))
	}
}

// A key created with no scope may do everything but approve payouts; one with read only may
// read and nothing else, and its 403 comes before the body is even looked at.
func TestDefaultScopesAndReadOnlyKeys(t *testing.T) {
	_, keys := keysOf(t, nil, []auth.Scope{auth.ScopeRead})
	def, reader := keys[0], keys[1]
	acc := env.Account(t, def, "USD")
	if r := env.Do(t, "GET", "/v1/accounts/"+acc, reader, "", ""); r.Status != http.StatusOK {
		t.Fatalf("read-only key reading: %d %s", r.Status, r.Body)
	}
	if r := env.Do(t, "POST", "/v1/transfers", reader, t.Name(), `{not json`); r.Status != http.StatusForbidden {
		t.Fatalf("read-only key writing: %d %s, want 403 before the body is parsed", r.Status, r.Body)
	}
	if r := env.Do(t, "POST", "/v1/transfers", reader, t.Name(), strings.Repeat("x", api.MaxBodyBytes+1)); r.Status != http.StatusForbidden {
		t.Fatalf("read-only key sending too much: %d %s, want 403 before the body is read", r.Status, r.Body)
	}
	if r := env.Do(t, "GET", "/v1/accounts", def, "", ""); r.Status != http.StatusOK {
		t.Fatalf("default key reading: %d %s", r.Status, r.Body)
	}
}
