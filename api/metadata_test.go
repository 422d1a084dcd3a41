package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/payments/payments/rig/testenv"
)

// Metadata on an account and a transfer: returned as given on the first answer, its replay, GET,
// the list and the event; part of the fingerprint; in the run's memo and nowhere the Temporal
// UI indexes or lists (search attributes, summary).
func TestMetadataIsTheClientsAndPartOfTheRequest(t *testing.T) {
	ownerID, key := env.Owner(t)
	const personal = "Jane Q. Example, +1 555 0100"
	acc := env.Do(t, "POST", "/v1/accounts", key, "acc-m", `{"currency":"USD","metadata":{"customer":"`+personal+`","tier":"gold"}}`)
	if acc.Status != http.StatusCreated || fmt.Sprint(acc.JSON(t)["metadata"]) != "map[customer:"+personal+" tier:gold]" {
		t.Fatalf("account: %d %s", acc.Status, acc.Body)
	}
	from := acc.JSON(t)["id"].(string)
	if got := env.Do(t, "GET", "/v1/accounts/"+from, key, "", "").JSON(t)["metadata"]; fmt.Sprint(got) != "map[customer:"+personal+" tier:gold]" {
		t.Fatalf("GET account metadata %v", got)
	}
	to := env.Account(t, key, "USD")
	if meta := env.Do(t, "GET", "/v1/accounts/"+to, key, "", "").JSON(t)["metadata"]; fmt.Sprint(meta) != "map[]" {
		t.Fatalf("an account without metadata shows %v, want {}", meta)
	}
	env.Fund(t, from, 1_000)

	body := func(meta string) string {
		return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":100,"currency":"USD","metadata":%s}`, from, to, meta)
	}
	first := env.Do(t, "POST", "/v1/transfers", key, "tr-m", body(`{"order":"A-1","note":"`+personal+`"}`))
	if first.Status != http.StatusCreated || !strings.Contains(string(first.Body), `"metadata":{"note":"`+personal+`","order":"A-1"}`) {
		t.Fatalf("transfer: %d %s", first.Status, first.Body)
	}
	tr := first.JSON(t)
	// Keys in another order: the same request, replayed byte for byte.
	if again := env.Do(t, "POST", "/v1/transfers", key, "tr-m", body(`{"note":"`+personal+`","order":"A-1"}`)); string(again.Body) != string(first.Body) {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
	// Other metadata, or none, under the same key: another request, which runs nothing.
	for _, meta := range []string{`{"order":"A-2","note":"` + personal + `"}`, `{}`} {
		r := env.Do(t, "POST", "/v1/transfers", key, "tr-m", body(meta))
		if r.Status != http.StatusUnprocessableEntity || r.JSON(t)["type"] != "/problems/idempotency-key-reused" {
			t.Fatalf("same key, metadata %s: %d %s", meta, r.Status, r.Body)
		}
	}
	if env.Balance(t, to) != 100 {
		t.Fatalf("destination balance %d, want 100: the money moved once", env.Balance(t, to))
	}
	for _, path := range []string{"/v1/transfers/" + tr["id"].(string), "/v1/transfers?limit=1"} {
		if got := env.Do(t, "GET", path, key, "", ""); !strings.Contains(string(got.Body), `"metadata":{"note":"`+personal+`","order":"A-1"}`) {
			t.Fatalf("GET %s: %s", path, got.Body)
		}
	}
	if ev := env.Do(t, "GET", "/v1/events?type=transfer.completed&limit=200", key, "", ""); !strings.Contains(string(ev.Body), `"order":"A-1"`) {
		t.Fatalf("the transfer.completed event does not carry the metadata: %s", ev.Body)
	}

	// The Temporal UI: in the memo, sealed (read with the keys, not without), and not in the
	// search attributes or the summary.
	desc, err := env.Temporal.DescribeWorkflowExecution(context.Background(), tr["workflow_id"].(string), "")
	if err != nil {
		t.Fatal(err)
	}
	info := desc.GetWorkflowExecutionInfo()
	memo := info.GetMemo().GetFields()["metadata"]
	var shown map[string]string
	if err := testenv.Converter.FromPayload(memo, &shown); err != nil || shown["note"] != personal {
		t.Fatalf("the memo read with the keys holds %v (%v), want the metadata", shown, err)
	}
	if strings.Contains(memo.String(), "Jane") {
		t.Fatalf("the memo holds the metadata in the clear: %v", memo)
	}
	for name, p := range info.GetSearchAttributes().GetIndexedFields() {
		if strings.Contains(string(p.GetData()), "Jane") {
			t.Fatalf("search attribute %s holds the metadata", name)
		}
	}
	if strings.Contains(desc.GetExecutionConfig().GetUserMetadata().GetSummary().String(), "Jane") {
		t.Fatal("the summary holds the metadata")
	}
	_ = ownerID
	env.Reconcile(t)
}

// Metadata past its limits is a 400 naming the field, and nothing is stored: the same key works
// with a corrected body.
func TestMetadataPastItsLimitsChangesNothing(t *testing.T) {
	_, key, from, to := fundedPair(t, 1_000)
	tooMany := make([]string, 21)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	for meta, field := range map[string]string{
		"{" + strings.Join(tooMany, ",") + "}":     "metadata",
		`{"` + strings.Repeat("k", 41) + `":"v"}`:  "metadata." + strings.Repeat("k", 41),
		`{"k":"` + strings.Repeat("v", 501) + `"}`: "metadata.k",
		`{"k":null}`: "metadata.k",
		`{"k":7}`:    "metadata.k",
		`"k=v"`:      "metadata",
	} {
		for _, route := range []struct{ path, body string }{
			{"/v1/transfers", fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":1,"currency":"USD","metadata":%s}`, from, to, meta)},
			{"/v1/accounts", `{"currency":"USD","metadata":` + meta + `}`},
		} {
			r := env.Do(t, "POST", route.path, key, "m", route.body)
			if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), `"field":"`+field+`"`) {
				t.Fatalf("POST %s with metadata %.50s: %d %s; want 400 naming %s", route.path, meta, r.Status, r.Body, field)
			}
		}
	}
	if env.Balance(t, from) != 1_000 || env.Count(t, `SELECT count(*) FROM idempotency_records WHERE key = 'm' AND resource_id LIKE 'tr_%'`) != 0 {
		t.Fatal("a refused request changed something")
	}
	if r := env.Do(t, "POST", "/v1/transfers", key, "m", testenv.TransferBody(from, to, 1)); r.Status != http.StatusCreated {
		t.Fatalf("the corrected request: %d %s", r.Status, r.Body)
	}
}
