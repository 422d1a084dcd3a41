package payouts_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// The payout list is the payouts of the caller's accounts, newest first, filtered by status,
// and nobody else's.
func TestPayoutListIsTheAccountOwners(t *testing.T) {
	c := newCustomer(t, env, 1_000)
	other := newCustomer(t, env, 1_000)
	first := c.accepted(t, t.Name()+"-1", 100, payee)
	failing := c.accepted(t, t.Name()+"-2", 100, closedPayee)
	refused := c.pay(t, t.Name()+"-3", 1_000_000, payee).JSON(t)["payout_id"].(string)
	other.accepted(t, t.Name()+"-other", 100, payee)
	c.waitPayout(t, failing, "failed")

	list := func(key, query string) (int, []string) {
		r := env.Do(t, "GET", "/v1/payouts?"+query, key, "", "")
		var page struct{ Data []struct{ ID, Status string } }
		_ = json.Unmarshal(r.Body, &page)
		var ids []string
		for _, p := range page.Data {
			ids = append(ids, p.ID)
		}
		return r.Status, ids
	}
	if status, ids := list(c.key, ""); status != http.StatusOK || !slices.Equal(ids, []string{refused, failing, first}) {
		t.Errorf("the customer's payouts: %d %v, want %v newest first", status, ids, []string{refused, failing, first})
	}
	if _, ids := list(c.key, "status=failed&account_id="+c.acc); !slices.Equal(ids, []string{refused, failing}) {
		t.Errorf("failed payouts: %v, want the refused and the failing one", ids)
	}
	if _, ids := list(c.key, "limit=1"); !slices.Equal(ids, []string{refused}) {
		t.Errorf("limit=1: %v", ids)
	}
	if status, _ := list(c.key, "account_id="+other.acc); status != http.StatusNotFound {
		t.Errorf("another owner's account: %d, want 404", status)
	}
	if status, _ := list(c.key, "status=completed"); status != http.StatusBadRequest {
		t.Errorf("a transfer's status: %d, want 400", status)
	}
}
