package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/payments/payments/internal/testenv"
)

// listAll reads every page of path (a list with its query) as apiKey, limit at a time, calling
// between after each page; it returns the ids in the order listed.
func listAll(t *testing.T, apiKey, path string, limit int, between func()) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for {
		r := env.Do(t, "GET", fmt.Sprintf("%s&limit=%d&cursor=%s", path, limit, url.QueryEscape(cursor)), apiKey, "", "")
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		var page struct {
			Data []struct {
				ID        string    `json:"id"`
				CreatedAt time.Time `json:"created_at"`
			}
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Data {
			ids = append(ids, d.ID)
		}
		if page.NextCursor == nil {
			return ids
		}
		cursor = *page.NextCursor
		if between != nil {
			between()
		}
	}
}

// inLedger is what the list must hold, read straight from the tables: the transfers touching
// ownerID's accounts (account, when not empty), newest first.
func inLedger(t *testing.T, ownerID, account, status string) []string {
	t.Helper()
	rows, err := env.DB.Query(context.Background(), `
		SELECT t.id FROM transfers t WHERE t.kind = 'transfer' AND ($3 = '' OR t.status = $3) AND EXISTS (
			SELECT 1 FROM accounts a WHERE a.id IN (t.from_account_id, t.to_account_id) AND a.owner_id = $1 AND ($2 = '' OR a.id = $2))
		ORDER BY t.created_at DESC, t.id DESC`, ownerID, account, status)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		ids = append(ids, id)
	}
	return ids
}

// The transfer list is the caller's transfers, each once (one between two of its own accounts
// too), newest first, filtered as asked, and its pages do not shift while new transfers arrive.
func TestTransferListIsTheCallersNewestFirst(t *testing.T) {
	aliceID, alice := env.Owner(t)
	bobID, bob := env.Owner(t)
	a1, a2 := env.Account(t, alice, "USD"), env.Account(t, alice, "USD")
	b1 := env.Account(t, bob, "USD")
	env.Fund(t, a1, 10_000)
	env.Fund(t, b1, 10_000)
	send := func(key, idem, from, to string, amount int64) {
		r := env.Do(t, "POST", "/v1/transfers", key, idem, testenv.TransferBody(from, to, amount))
		if r.Status != http.StatusCreated && r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("transfer %s: %d %s", idem, r.Status, r.Body)
		}
	}
	send(alice, t.Name()+"-own", a1, a2, 100)
	for i := range 3 {
		send(alice, fmt.Sprintf("%s-out-%d", t.Name(), i), a1, b1, 10)
	}
	send(bob, t.Name()+"-in", b1, a2, 7)
	send(alice, t.Name()+"-too-much", a2, b1, 1_000_000) // rejected

	for _, c := range []struct {
		name, key, owner, query, account, status string
	}{
		{"alice's", alice, aliceID, "", "", ""},
		{"bob's", bob, bobID, "", "", ""},
		{"alice's second account", alice, aliceID, "account_id=" + a2, a2, ""},
		{"alice's rejected", alice, aliceID, "status=rejected", "", "rejected"},
	} {
		want := inLedger(t, c.owner, c.account, c.status)
		got := listAll(t, c.key, "/v1/transfers?"+c.query, 2, nil)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s transfers: listed %v, the ledger holds %v", c.name, got, want)
		}
	}
	if n := len(inLedger(t, aliceID, "", "")); n != 7 { // the deposit, one own, three out, one in, one rejected
		t.Errorf("alice has %d transfers, want 7", n)
	}

	// New transfers while a client pages through: the pages it had not read yet hold exactly the
	// older transfers it had not seen, none twice.
	before := inLedger(t, aliceID, "", "")
	n := 0
	got := listAll(t, alice, "/v1/transfers?", 2, func() {
		n++
		send(alice, fmt.Sprintf("%s-during-%d", t.Name(), n), a1, a2, 1)
	})
	if !slices.Equal(got, before) {
		t.Errorf("listed while transfers arrived: %v, want the %d that were there: %v", got, len(before), before)
	}

	// A window: only what was created after the third transfer out.
	var cut time.Time
	if err := env.DB.QueryRow(context.Background(), `SELECT created_at FROM transfers WHERE id = $1`, before[3]).Scan(&cut); err != nil {
		t.Fatal(err)
	}
	window := listAll(t, alice, "/v1/transfers?created_after="+url.QueryEscape(cut.UTC().Format(time.RFC3339Nano)), 50, nil)
	for _, id := range window {
		if slices.Index(before, id) >= 3 {
			t.Errorf("created_after %s listed %s, created before it", cut, id)
		}
	}

	for _, q := range []string{"status=done", "created_after=yesterday", "cursor=zzz", "limit=0", "created_before=2026-13-01T00:00:00Z"} {
		if r := env.Do(t, "GET", "/v1/transfers?"+q, alice, "", ""); r.Status != http.StatusBadRequest {
			t.Errorf("GET /v1/transfers?%s: %d %s, want 400", q, r.Status, r.Body)
		}
	}
	if r := env.Do(t, "GET", "/v1/transfers?account_id="+b1, alice, "", ""); r.Status != http.StatusNotFound {
		t.Errorf("another owner's account: %d, want 404", r.Status)
	}
}
