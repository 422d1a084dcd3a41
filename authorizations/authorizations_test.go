package authorizations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/rig/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, "payments_test_authorizations", testenv.Options{})
}

// parties are a payer (alice, from, funded) and a payee (bob, to), each with a key of their own.
type parties struct {
	alice, bob, from, to, aliceID string
}

func newParties(t *testing.T, funded int64) parties {
	t.Helper()
	var p parties
	p.aliceID, p.alice = env.Owner(t)
	_, p.bob = env.Owner(t)
	p.from, p.to = env.Account(t, p.alice, "USD"), env.Account(t, p.bob, "USD")
	env.Fund(t, p.from, funded)
	return p
}

func authorizationBody(from, to string, amount int64, extra string) string {
	return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD"%s}`, from, to, amount, extra)
}

// authorize holds amount of p's money for bob and returns the authorization as the API showed it.
func (p parties) authorize(t *testing.T, api *testenv.Env, key string, amount int64, extra string) map[string]any {
	t.Helper()
	r := api.Do(t, "POST", "/v1/authorizations", p.alice, key, authorizationBody(p.from, p.to, amount, extra))
	if r.Status != http.StatusCreated {
		t.Fatalf("authorize: %d %s", r.Status, r.Body)
	}
	au := r.JSON(t)
	if au["status"] != "authorized" || r.Header.Get("Location") != "/v1/authorizations/"+au["id"].(string) {
		t.Fatalf("authorization %s (Location %q)", r.Body, r.Header.Get("Location"))
	}
	return au
}

// money is an account as the ledger holds it: posted and available.
func money(t *testing.T, account string) (balance, available int64) {
	t.Helper()
	balance = env.Balance(t, account)
	held := int64(env.Count(t, `SELECT held_minor FROM accounts WHERE id = $1`, account))
	return balance, balance - held
}

func wantMoney(t *testing.T, what, account string, balance, available int64) {
	t.Helper()
	if b, a := money(t, account); b != balance || a != available {
		t.Fatalf("%s: balance %d, available %d; want %d, %d", what, b, a, balance, available)
	}
}

func capturePath(id string) string { return "/v1/authorizations/" + id + "/capture" }
func voidPath(id string) string    { return "/v1/authorizations/" + id + "/void" }

// A partial capture moves exactly what it takes, as entries of the authorization's own, and
// releases the rest; it replays byte for byte; both owners see the authorization and its events;
// the payer, a stranger and a capture above the amount change nothing.
func TestPartialCaptureMovesThatAndReleasesTheRest(t *testing.T) {
	bothShapes(t, func(t *testing.T, api *testenv.Env) {
		p := newParties(t, 1_000)
		au := p.authorize(t, api, "hold-1", 600, `,"description":"room 12","metadata":{"booking":"B-7"}`)
		id := au["id"].(string)
		if au["workflow_id"] != "authorization/"+p.aliceID+"/hold-1" || au["amount_captured_minor"] != 0.0 ||
			au["captured_at"] != nil || au["metadata"].(map[string]any)["booking"] != "B-7" {
			t.Fatalf("authorization %v", au)
		}
		wantMoney(t, "the payer after the hold", p.from, 1_000, 400)
		wantMoney(t, "the payee after the hold", p.to, 0, 0)

		// Refused, and not stored: above the amount; by the payer; by a stranger.
		over := api.Do(t, "POST", capturePath(id), p.bob, "take", `{"amount_minor":601}`)
		if over.Status != http.StatusUnprocessableEntity || over.JSON(t)["type"] != "/problems/capture-exceeds-authorization" {
			t.Fatalf("capture above the amount: %d %s", over.Status, over.Body)
		}
		_, stranger := env.Owner(t)
		for _, key := range []string{p.alice, stranger} {
			for _, path := range []string{capturePath(id), voidPath(id)} {
				if r := api.Do(t, "POST", path, key, "not-mine", `{}`); r.Status != http.StatusNotFound {
					t.Fatalf("POST %s by someone else than the payee: %d %s", path, r.Status, r.Body)
				}
			}
		}
		if r := api.Do(t, "GET", "/v1/authorizations/"+id, stranger, "", ""); r.Status != http.StatusNotFound {
			t.Fatalf("a stranger reading the authorization: %d", r.Status)
		}
		wantMoney(t, "the payer after refused decisions", p.from, 1_000, 400)

		first := api.Do(t, "POST", capturePath(id), p.bob, "take", `{"amount_minor":250}`)
		if first.Status != http.StatusOK {
			t.Fatalf("capture: %d %s", first.Status, first.Body)
		}
		got := first.JSON(t)
		if got["status"] != "captured" || got["amount_captured_minor"] != 250.0 || got["captured_at"] == nil {
			t.Fatalf("captured %s", first.Body)
		}
		again := api.Do(t, "POST", capturePath(id), p.bob, "take", `{"amount_minor":250}`)
		if again.Status != first.Status || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %s", again.Status, again.Body)
		}
		wantMoney(t, "the payer after capturing 250 of 600", p.from, 750, 750)
		wantMoney(t, "the payee after capturing 250 of 600", p.to, 250, 250)
		if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1 AND
			((account_id = $2 AND amount_minor = -250) OR (account_id = $3 AND amount_minor = 250))`, id, p.from, p.to); n != 2 {
			t.Fatalf("the capture has %d of its two entries", n)
		}
		if api.Settled(t, au["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Fatal("the authorization's workflow did not complete")
		}
		// A second capture, and a void, after the end: 422 with the status, final and replayed.
		for _, path := range []string{capturePath(id), voidPath(id)} {
			late := api.Do(t, "POST", path, p.bob, "late", `{}`)
			body := late.JSON(t)
			if late.Status != http.StatusUnprocessableEntity || body["type"] != "/problems/authorization-not-pending" ||
				body["authorization_status"] != "captured" || body["authorization_id"] != id {
				t.Fatalf("POST %s after the capture: %d %s", path, late.Status, late.Body)
			}
			if replay := api.Do(t, "POST", path, p.bob, "late", ``); string(replay.Body) != string(late.Body) ||
				replay.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the late answer replayed: %d %s", replay.Status, replay.Body)
			}
		}
		wantMoney(t, "the payer after the late decisions", p.from, 750, 750)
		for _, key := range []string{p.alice, p.bob} {
			r := api.Do(t, "GET", "/v1/authorizations/"+id, key, "", "")
			if r.Status != http.StatusOK || r.JSON(t)["status"] != "captured" {
				t.Fatalf("GET: %d %s", r.Status, r.Body)
			}
			for _, typ := range []string{"authorization.created", "authorization.captured"} {
				if !env.HasEvent(t, key, typ, id) {
					t.Fatalf("no %s event of %s in the feed", typ, id)
				}
			}
		}
		env.Reconcile(t)
	})
}

// bothShapes runs f against the API with the worker in its process and against one without
// (`payments api`: the first answer asked by Update).
func bothShapes(t *testing.T, f func(t *testing.T, api *testenv.Env)) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) { f(t, env.With(t, testenv.Options{Split: split})) })
	}
}

// A void releases the hold; the payee's capture after it is 422 authorization-not-pending.
func TestVoidReleases(t *testing.T) {
	p := newParties(t, 500)
	id := p.authorize(t, env, "hold", 500, "")["id"].(string)
	wantMoney(t, "the payer after the hold", p.from, 500, 0)
	// Nothing is available: a transfer from the payer is refused.
	if r := env.Do(t, "POST", "/v1/transfers", p.alice, "spend", testenv.TransferBody(p.from, p.to, 1)); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a transfer of held money: %d %s", r.Status, r.Body)
	}
	r := env.Do(t, "POST", voidPath(id), p.bob, "void", "")
	if r.Status != http.StatusOK || r.JSON(t)["status"] != "voided" || r.JSON(t)["voided_at"] == nil {
		t.Fatalf("void: %d %s", r.Status, r.Body)
	}
	wantMoney(t, "the payer after the void", p.from, 500, 500)
	wantMoney(t, "the payee after the void", p.to, 0, 0)
	late := env.Do(t, "POST", capturePath(id), p.bob, "capture", "")
	if late.Status != http.StatusUnprocessableEntity || late.JSON(t)["authorization_status"] != "voided" {
		t.Fatalf("capture after the void: %d %s", late.Status, late.Body)
	}
	if !env.HasEvent(t, p.alice, "authorization.voided", id) {
		t.Fatal("no authorization.voided event")
	}
	env.Reconcile(t)
}

// An authorization of more than is available is refused: 422 insufficient-funds naming it,
// final and replayed, nothing held.
func TestAuthorizationWithoutFundsIsRefused(t *testing.T) {
	p := newParties(t, 100)
	first := env.Do(t, "POST", "/v1/authorizations", p.alice, "too-much", authorizationBody(p.from, p.to, 101, ""))
	body := first.JSON(t)
	if first.Status != http.StatusUnprocessableEntity || body["type"] != "/problems/insufficient-funds" || body["authorization_id"] == nil {
		t.Fatalf("authorize without funds: %d %s", first.Status, first.Body)
	}
	again := env.Do(t, "POST", "/v1/authorizations", p.alice, "too-much", authorizationBody(p.from, p.to, 101, ""))
	if string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
	au := env.Do(t, "GET", "/v1/authorizations/"+body["authorization_id"].(string), p.alice, "", "").JSON(t)
	if au["status"] != "rejected" {
		t.Fatalf("the refused authorization reads %v", au)
	}
	wantMoney(t, "the payer", p.from, 100, 100)
	// Its payee's capture is refused as for any authorization that has ended, and reconciles.
	late := env.Do(t, "POST", capturePath(body["authorization_id"].(string)), p.bob, "of-refused", "")
	if late.Status != http.StatusUnprocessableEntity || late.JSON(t)["authorization_status"] != "rejected" {
		t.Fatalf("capture of a refused authorization: %d %s", late.Status, late.Body)
	}
	// Bad requests change nothing and are not stored.
	for _, bad := range []string{
		authorizationBody(p.from, p.to, 10, `,"expires_in":"0.5s"`),
		authorizationBody(p.from, p.to, 10, `,"expires_in":"721h"`),
		authorizationBody(p.from, p.to, 10, `,"expires_in":"soon"`),
		authorizationBody(p.from, p.from, 10, ""),
	} {
		if r := env.Do(t, "POST", "/v1/authorizations", p.alice, "bad", bad); r.Status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", bad, r.Status, r.Body)
		}
	}
	if r := env.Do(t, "POST", "/v1/authorizations", p.alice, "bad", authorizationBody(p.from, p.to, 10, "")); r.Status != http.StatusCreated {
		t.Fatalf("the key of refused requests, used for a good one: %d %s", r.Status, r.Body)
	}
	env.Reconcile(t)
}

// An authorization expires on its own timer: the hold is released at expires_at, the status is
// expired (in the ledger and the run's search attribute), and a capture after it is 422
// authorization-not-pending, final and replayed.
func TestExpiryReleasesAndALaterCaptureIsRefused(t *testing.T) {
	p := newParties(t, 300)
	au := p.authorize(t, env, "short", 300, `,"expires_in":"2s"`)
	id, workflowID := au["id"].(string), au["workflow_id"].(string)
	expiresAt, err := time.Parse(time.RFC3339Nano, au["expires_at"].(string))
	created, _ := time.Parse(time.RFC3339Nano, au["created_at"].(string))
	if err != nil || expiresAt.Sub(created) < 2*time.Second || expiresAt.Sub(created) > 3*time.Second {
		t.Fatalf("expires_at %v for created_at %v", au["expires_at"], au["created_at"])
	}
	wantMoney(t, "the payer while authorized", p.from, 300, 0)
	if env.Settled(t, workflowID) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the authorization's run did not complete")
	}
	got := env.Do(t, "GET", "/v1/authorizations/"+id, p.bob, "", "").JSON(t)
	expiredAt, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(got["expired_at"]))
	if got["status"] != "expired" || expiredAt.Before(expiresAt) {
		t.Fatalf("after its expiry: %v", got)
	}
	wantMoney(t, "the payer after the expiry", p.from, 300, 300)
	late := env.Do(t, "POST", capturePath(id), p.bob, "too-late", `{"amount_minor":100}`)
	if late.Status != http.StatusUnprocessableEntity || late.JSON(t)["type"] != "/problems/authorization-not-pending" ||
		late.JSON(t)["authorization_status"] != "expired" {
		t.Fatalf("capture after the expiry: %d %s", late.Status, late.Body)
	}
	if replay := env.Do(t, "POST", capturePath(id), p.bob, "too-late", `{"amount_minor":100}`); string(replay.Body) != string(late.Body) {
		t.Fatalf("the refusal replayed: %s", replay.Body)
	}
	wantMoney(t, "the payee", p.to, 0, 0)
	// The UI filters it by its status.
	testenv.WaitFor(t, "the expired authorization in visibility", func() bool {
		resp, err := env.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s' AND AuthorizationStatus = 'expired'", workflowID)})
		return err == nil && len(resp.GetExecutions()) == 1
	})
	if !env.HasEvent(t, p.bob, "authorization.expired", id) {
		t.Fatal("no authorization.expired event")
	}
	env.Reconcile(t)
}

// untilFinal sends a request until its answer is final, as a client does: a 409 (the key in use
// by a request still running) or a 503 (Temporal busy: fifty Updates at once on one run exceed
// its in-flight limit under load) is sent again, for at most a minute.
func untilFinal(t *testing.T, send func() testenv.Response) testenv.Response {
	deadline := time.Now().Add(time.Minute)
	for {
		r := send()
		if r.Status != http.StatusConflict && r.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Fifty captures and voids at once, under keys of their own, on one authorization: exactly one
// wins; every other is 422 authorization-not-pending; every answer is final and replays; the
// ledger moved the money at most once.
func TestConcurrentCapturesAndVoidsOneWins(t *testing.T) {
	p := newParties(t, 1_000)
	id := p.authorize(t, env, "contested", 800, "")["id"].(string)
	type sent struct {
		path, key, body string
		status          int
		answer          []byte
	}
	decisions := make([]sent, 50)
	var wg sync.WaitGroup
	for i := range decisions {
		d := &decisions[i]
		d.key = fmt.Sprintf("decision-%d", i)
		d.path, d.body = capturePath(id), fmt.Sprintf(`{"amount_minor":%d}`, 100+i)
		if i%2 == 1 {
			d.path, d.body = voidPath(id), `{}`
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := untilFinal(t, func() testenv.Response { return env.Do(t, "POST", d.path, p.bob, d.key, d.body) })
			d.status, d.answer = r.Status, r.Body
		}()
	}
	wg.Wait()
	statuses := map[int]int{}
	for _, d := range decisions {
		statuses[d.status]++
	}
	t.Logf("answers by status: %v", statuses)
	var winner *sent
	for i := range decisions {
		d := &decisions[i]
		switch d.status {
		case http.StatusOK:
			if winner != nil {
				t.Fatalf("two decisions won: %s and %s", winner.answer, d.answer)
			}
			winner = d
		case http.StatusUnprocessableEntity:
			var pr map[string]any
			_ = json.Unmarshal(d.answer, &pr)
			if pr["type"] != "/problems/authorization-not-pending" {
				t.Fatalf("%s: %s", d.key, d.answer)
			}
		default:
			for _, ev := range env.History(t, "authorization/"+p.aliceID+"/contested", "") {
				t.Log(ev.GetEventType(), ev.GetEventTime().AsTime().Format("15:04:05.000")) // what the run took in
			}
			t.Fatalf("%s: %d %s", d.key, d.status, d.answer)
		}
		if replay := env.Do(t, "POST", d.path, p.bob, d.key, d.body); replay.Status != d.status || string(replay.Body) != string(d.answer) {
			t.Fatalf("%s replayed %d %s, first %d %s", d.key, replay.Status, replay.Body, d.status, d.answer)
		}
	}
	if winner == nil {
		t.Fatal("no decision won")
	}
	// The test's own model: the winner's decision, and nothing else, moved money.
	wantFrom, wantTo := int64(1_000), int64(0)
	var won map[string]any
	_ = json.Unmarshal(winner.answer, &won)
	if winner.path == capturePath(id) {
		var body struct {
			AmountMinor int64 `json:"amount_minor"`
		}
		_ = json.Unmarshal([]byte(winner.body), &body)
		wantFrom, wantTo = 1_000-body.AmountMinor, body.AmountMinor
		if won["status"] != "captured" || int64(won["amount_captured_minor"].(float64)) != body.AmountMinor {
			t.Fatalf("the winning capture answered %s", winner.answer)
		}
	} else if won["status"] != "voided" {
		t.Fatalf("the winning void answered %s", winner.answer)
	}
	wantMoney(t, "the payer", p.from, wantFrom, wantFrom)
	wantMoney(t, "the payee", p.to, wantTo, wantTo)
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1`, id); n != 2*int(min(wantTo, 1)) {
		t.Fatalf("%d entries under the authorization", n)
	}
	env.Reconcile(t)
}

// authorizationsPage lists key's authorizations with query.
func authorizationsPage(t *testing.T, key, query string) []map[string]any {
	t.Helper()
	r := env.Do(t, "GET", "/v1/authorizations?"+query, key, "", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/authorizations?%s: %d %s", query, r.Status, r.Body)
	}
	var page struct{ Data []map[string]any }
	if err := json.Unmarshal(r.Body, &page); err != nil {
		t.Fatal(err)
	}
	return page.Data
}

// The list shows the authorizations of the caller's accounts, newest first, filtered by status.
func TestAuthorizationsAreListed(t *testing.T) {
	p := newParties(t, 1_000)
	a := p.authorize(t, env, "list-1", 100, "")["id"].(string)
	b := p.authorize(t, env, "list-2", 100, "")["id"].(string)
	if r := env.Do(t, "POST", voidPath(a), p.bob, "void-1", ""); r.Status != http.StatusOK {
		t.Fatalf("void: %d %s", r.Status, r.Body)
	}
	for _, key := range []string{p.alice, p.bob} {
		all := authorizationsPage(t, key, "")
		if len(all) != 2 || all[0]["id"] != b || all[1]["id"] != a {
			t.Fatalf("list: %v", all)
		}
		if voided := authorizationsPage(t, key, "status=voided"); len(voided) != 1 || voided[0]["id"] != a {
			t.Fatalf("voided: %v", voided)
		}
	}
	if r := env.Do(t, "GET", "/v1/authorizations?status=held", p.alice, "", ""); r.Status != http.StatusBadRequest {
		t.Fatalf("an unknown status: %d", r.Status)
	}
}

// TestRecordHistories writes a real history of every path of the Authorization workflow
// (captured in part, voided, expired, refused; held and captured through an API without a
// worker, its first answer asked by Update), which workflows' tests replay against every later
// change. Run it when the workflow changes, with a new version suffix (testenv.RecordCommand).
func TestRecordHistories(t *testing.T) {
	testenv.SkipUnlessRecording(t)
	p := newParties(t, 1_000)
	wf := func(key string) string { return "authorization/" + p.aliceID + "/" + key }
	captured := p.authorize(t, env, "rec-captured", 100, "")["id"].(string)
	if r := env.Do(t, "POST", capturePath(captured), p.bob, "rec-capture", `{"amount_minor":60}`); r.Status != http.StatusOK {
		t.Fatalf("capture: %d %s", r.Status, r.Body)
	}
	voided := p.authorize(t, env, "rec-voided", 100, "")["id"].(string)
	if r := env.Do(t, "POST", voidPath(voided), p.bob, "rec-void", ""); r.Status != http.StatusOK {
		t.Fatalf("void: %d %s", r.Status, r.Body)
	}
	p.authorize(t, env, "rec-expired", 100, `,"expires_in":"1s"`)
	if r := env.Do(t, "POST", "/v1/authorizations", p.alice, "rec-refused", authorizationBody(p.from, p.to, 10_000, "")); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("refused: %d %s", r.Status, r.Body)
	}
	split := env.With(t, testenv.Options{Split: true})
	asked := p.authorize(t, split, "rec-asked", 100, "")["id"].(string)
	if r := split.Do(t, "POST", capturePath(asked), p.bob, "rec-asked-capture", ""); r.Status != http.StatusOK {
		t.Fatalf("capture: %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"captured", "voided", "expired", "refused", "asked"} {
		env.Settled(t, wf("rec-"+path))
		env.RecordHistory(t, testenv.AuthorizationHistory, path, wf("rec-"+path), "")
	}
}

// A capture at or after expires_at, when the run has not expired the authorization yet (its
// expiry waits for a worker, or for PostgreSQL), expires it instead and is refused: the hold is
// released at expires_at, whoever asks first.
func TestACaptureAfterTheExpiryExpiresIt(t *testing.T) {
	p := newParties(t, 400)
	au := p.authorize(t, env, "overdue", 400, `,"expires_in":"1h"`)
	id := au["id"].(string)
	// Its time has come in the ledger; its run's timer is an hour away.
	if _, err := env.DB.Exec(t.Context(), `UPDATE authorizations SET expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	r := env.Do(t, "POST", capturePath(id), p.bob, "overdue-capture", `{"amount_minor":400}`)
	if r.Status != http.StatusUnprocessableEntity || r.JSON(t)["authorization_status"] != "expired" {
		t.Fatalf("capture after expires_at: %d %s", r.Status, r.Body)
	}
	wantMoney(t, "the payer", p.from, 400, 400)
	wantMoney(t, "the payee", p.to, 0, 0)
	if env.Settled(t, au["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the run did not end with the expiry")
	}
	env.Reconcile(t)
}

// A capture of an authorization whose money is not held yet (claimed, its run not started or
// still holding) is 409 authorization-pending with Retry-After, and not stored: the same key
// works once it is held.
func TestACaptureBeforeTheHoldIsToComeAgain(t *testing.T) {
	p := newParties(t, 400)
	id := "au_claimedonly" + fmt.Sprint(time.Now().UnixNano())
	if _, err := env.DB.Exec(t.Context(), `INSERT INTO authorizations (id, status, from_account_id, to_account_id, amount_minor,
		currency, expires_at, workflow_id) VALUES ($1, 'pending', $2, $3, 100, 'USD', now() + interval '1 hour', 'authorization/x/y')`,
		id, p.from, p.to); err != nil {
		t.Fatal(err)
	}
	r := env.Do(t, "POST", capturePath(id), p.bob, "too-soon", "")
	if r.Status != http.StatusConflict || r.JSON(t)["type"] != "/problems/authorization-pending" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("capture before the hold: %d %s", r.Status, r.Body)
	}
	if n := env.Count(t, `SELECT count(*) FROM idempotency_records WHERE key = 'too-soon'`); n != 0 {
		t.Fatalf("%d records stored for a capture that is to come again", n)
	}
	if _, err := env.DB.Exec(t.Context(), `DELETE FROM authorizations WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}
