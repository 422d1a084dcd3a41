package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/rig/testenv"
)

// `payouts pending` lists the payouts waiting for approval, oldest first, one line each with
// what a second person needs to decide: id, account, amount, since when, due by, asked by
// which key. One decided is no longer listed.
func TestPayoutsPendingListsWhatWaits(t *testing.T) {
	commandsOn(t, env.URL)
	e := env.With(t, testenv.Options{ApprovalThreshold: 1_000})
	ownerID, key := e.Owner(t)
	acc := e.Account(t, key, "USD")
	e.Fund(t, acc, 10_000)
	_, approver := e.SecondKey(t, ownerID, auth.ScopeRead, auth.ScopeApprove)
	pay := func(idem string, amount int64) string {
		body := fmt.Sprintf(`{"account_id":%q,"amount_minor":%d,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}`, acc, amount)
		r := e.Do(t, "POST", "/v1/payouts", key, idem, body)
		if r.Status != http.StatusCreated {
			t.Fatalf("payout %s: %d %s", idem, r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	// (A payout below the threshold would go to the bank, which this package has not: its failed
	// run would be TestRerunFailed's. The payouts tests show it does not wait.)
	first, second := pay("first", 2_000), pay("second", 1_000)
	pending := func() []string {
		var out bytes.Buffer
		if err := dispatch(context.Background(), []string{"payouts", "pending"}, &out); err != nil {
			t.Fatalf("payouts pending: %v", err)
		}
		var ours []string
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if strings.Contains(line, acc) {
				ours = append(ours, line)
			}
		}
		return ours
	}
	lines := pending()
	keyID := e.KeyID(t, key)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], first+" ") || !strings.HasPrefix(lines[1], second+" ") {
		t.Fatalf("payouts pending, want %s then %s:\n%s", first, second, strings.Join(lines, "\n"))
	}
	for i, amount := range []string{"2000 USD", "1000 USD"} {
		f := strings.Fields(lines[i])
		if len(f) != 12 || f[1] != acc || f[2]+" "+f[3] != amount || f[4] != "since" || f[6] != "due" || f[11] != keyID {
			t.Errorf("line %q: want id, account, %s, since, due by, asked by %s", lines[i], amount, keyID)
		}
		since, err1 := time.Parse(time.RFC3339, f[5])
		due, err2 := time.Parse(time.RFC3339, f[8])
		if err1 != nil || err2 != nil || due.Sub(since).Round(time.Hour) != 72*time.Hour {
			t.Errorf("line %q: since %v, due by %v: want 72h apart", lines[i], f[5], f[8])
		}
	}
	if r := e.Do(t, "POST", "/v1/payouts/"+first+"/reject", approver, "no", `{}`); r.Status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.Status, r.Body)
	}
	if lines := pending(); len(lines) != 1 || !strings.HasPrefix(lines[0], second+" ") {
		t.Fatalf("after the rejection, want %s alone:\n%s", second, strings.Join(lines, "\n"))
	}
	if r := e.Do(t, "POST", "/v1/payouts/"+second+"/reject", approver, "no-2", `{}`); r.Status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.Status, r.Body)
	}
	e.Reconcile(t)
}
