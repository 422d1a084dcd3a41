package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/rig/testenv"
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

// createdAt is when transfer id was created, as a query parameter.
func createdAt(t *testing.T, id string) string {
	t.Helper()
	var at time.Time
	if err := env.DB.QueryRow(context.Background(), `SELECT created_at FROM transfers WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return url.QueryEscape(at.UTC().Format(time.RFC3339Nano))
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
	var alices []string // the model: alice's transfers, oldest first (after the deposit)
	send := func(key, idem, from, to string, amount int64) {
		r := env.Do(t, "POST", "/v1/transfers", key, idem, testenv.TransferBody(from, to, amount))
		if r.Status != http.StatusCreated && r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("transfer %s: %d %s", idem, r.Status, r.Body)
		}
		id, _ := r.JSON(t)["id"].(string) // a 201's; a 422's names it as transfer_id
		if r.Status != http.StatusCreated {
			id, _ = r.JSON(t)["transfer_id"].(string)
		}
		alices = append(alices, id)
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
	if n == 0 {
		t.Fatal("no transfer arrived while the list was read")
	}
	if !slices.Equal(got, before) {
		t.Errorf("listed while transfers arrived: %v, want the %d that were there: %v", got, len(before), before)
	}

	// Windows, both bounds exclusive: what alice's transfers after the second one out are, and
	// those between her own and the one bob sent her.
	if len(alices) != 6+n {
		t.Fatalf("sent %d of alice's transfers, want %d", len(alices), 6+n)
	}
	for _, w := range []struct {
		query string
		want  []string // oldest first
	}{
		{"created_after=" + createdAt(t, alices[2]), alices[3:]},
		{"created_after=" + createdAt(t, alices[0]) + "&created_before=" + createdAt(t, alices[4]), alices[1:4]},
	} {
		want := slices.Clone(w.want)
		slices.Reverse(want)
		if got := listAll(t, alice, "/v1/transfers?"+w.query, 2, nil); len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: listed %v, want %v", w.query, got, want)
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

// A list refuses (400 invalid-request) what it does not understand: a misspelled or unknown
// parameter, one given twice, a query that does not parse. Otherwise a misspelled account_id
// would list every account's. An empty value is the parameter left out. The time bounds are
// exclusive wherever they are: nothing was created before the year 1, or after the year 9999.
// The same for payouts, and for the events feed and an account's entries, with their own
// parameters.
func TestListsRefuseWhatTheyDoNotUnderstand(t *testing.T) {
	_, alice := env.Owner(t)
	a1, a2 := env.Account(t, alice, "USD"), env.Account(t, alice, "USD")
	env.Fund(t, a1, 100)
	moved := env.Do(t, "POST", "/v1/transfers", alice, t.Name(), testenv.TransferBody(a1, a2, 10))
	refused := env.Do(t, "POST", "/v1/payouts", alice, t.Name(), fmt.Sprintf(
		`{"account_id":%q,"amount_minor":1000,"currency":"USD","destination":{"account_number":"000123456789","bank_code":"BANKUS33"}}`, a1))
	if moved.Status != http.StatusCreated || refused.Status != http.StatusUnprocessableEntity || refused.JSON(t)["payout_id"] == nil {
		t.Fatalf("transfer %d %s, payout %d %s", moved.Status, moved.Body, refused.Status, refused.Body)
	}
	lists := map[string][]string{ // the model: alice's, newest first
		"/v1/transfers": {moved.JSON(t)["id"].(string), fundedBy(t, a1)},
		"/v1/payouts":   {refused.JSON(t)["payout_id"].(string)},
	}
	for path, want := range lists {
		for _, q := range []string{"", "account_id=&status=&created_before=", "created_after=0001-01-01T00:00:00Z"} {
			if got := listAll(t, alice, path+"?"+q, 50, nil); !slices.Equal(got, want) {
				t.Errorf("%s?%s: listed %v, want %v", path, q, got, want)
			}
		}
		for _, q := range []string{"created_before=0001-01-01T00:00:00Z", "created_before=0001-01-01T00:00:00%2B01:00",
			"created_after=9999-12-31T23:59:59.999999999Z", "created_after=9999-12-31T23:59:59-23:59"} {
			if got := listAll(t, alice, path+"?"+q, 50, nil); len(got) != 0 {
				t.Errorf("%s?%s: listed %v, want nothing", path, q, got)
			}
		}
		for _, q := range []string{"acount_id=" + a1, "account_id=" + a1 + "&account_id=" + a2, "Status=completed",
			"account_id=" + a1 + ";status=completed", "limit=5&limt=1", "%zz=1", "status=completed&status=completed"} {
			refusedQuery(t, alice, path+"?"+q)
		}
	}
	for _, path := range []string{"/v1/events?afer=evt_x", "/v1/events?type=transfer.completed&type=payout.paid",
		"/v1/events?limit=1&types=x", "/v1/accounts/" + a1 + "/entries?curser=x", "/v1/accounts/" + a1 + "/entries?limit=1&limit=2"} {
		refusedQuery(t, alice, path)
	}
}

// refusedQuery holds that GET path is refused as a bad request.
func refusedQuery(t *testing.T, key, path string) {
	t.Helper()
	r := env.Do(t, "GET", path, key, "", "")
	if r.Status != http.StatusBadRequest || r.Header.Get("Content-Type") != "application/problem+json" ||
		r.JSON(t)["type"] != "/problems/invalid-request" || r.JSON(t)["errors"] == nil {
		t.Errorf("GET %s: %d %s, want 400 invalid-request naming the parameter", path, r.Status, r.Body)
	}
}

// fundedBy is the deposit that funded account (its first entry).
func fundedBy(t *testing.T, account string) string {
	t.Helper()
	var id string
	if err := env.DB.QueryRow(context.Background(), `SELECT transfer_id FROM entries WHERE account_id = $1 ORDER BY id LIMIT 1`, account).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// FuzzListQuery sends any query to the lists: never a 5xx, and a 200 only for a query made of
// the list's own parameters, each at most once, so that no filter is ever silently dropped.
func FuzzListQuery(f *testing.F) {
	for _, q := range []string{"", "acount_id=x", "account_id=&status=", "created_before=0001-01-01T00:00:00Z",
		"created_after=9999-12-31T23:59:59.999999999-23:59", "status=completed;limit=1", "%zz=1", "limit=1&limit=2",
		"cursor=&cursor=", "Limit=5", "created_before=0000-01-01T00:00:00%2B23:59", "&&=&"} {
		f.Add(q)
	}
	key := ""
	f.Fuzz(func(t *testing.T, q string) {
		if key == "" {
			_, key = env.Owner(t)
			env.Fund(t, env.Account(t, key, "USD"), 100)
		}
		if strings.ContainsFunc(q, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '#' }) {
			t.Skip("not a query a client can send as it is")
		}
		for _, path := range []string{"/v1/transfers", "/v1/payouts"} {
			req := env.Request(t, "GET", path, key, "")
			req.URL.RawQuery = q
			r := testenv.Send(t, req)
			switch {
			case r.Status >= 500:
				t.Fatalf("GET %s?%q: %d %s", path, q, r.Status, r.Body)
			case r.Status == http.StatusOK && !onlyListParams(q):
				t.Fatalf("GET %s?%q: 200 %s, for a query that is not the list's", path, q, r.Body)
			}
		}
	})
}

// onlyListParams reports whether q parses into the lists' parameters, each at most once.
func onlyListParams(q string) bool {
	values, err := url.ParseQuery(q)
	if err != nil {
		return false
	}
	for name, v := range values {
		if !slices.Contains([]string{"account_id", "status", "created_after", "created_before", "limit", "cursor"}, name) || len(v) > 1 {
			return false
		}
	}
	return true
}
