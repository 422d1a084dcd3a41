package schedules_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/activities"
	"github.com/payments/payments/api/request"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, "payments_test_schedules", testenv.Options{})
}

// parties are a payer (alice, from, funded) and a payee (bob, to), each with a key of their own.
type parties struct {
	alice, bob, from, to, aliceID string
}

func newParties(t *testing.T, e *testenv.Env, funded int64) parties {
	t.Helper()
	var p parties
	p.aliceID, p.alice = e.Owner(t)
	_, p.bob = e.Owner(t)
	p.from, p.to = e.Account(t, p.alice, "USD"), e.Account(t, p.bob, "USD")
	if funded > 0 {
		e.Fund(t, p.from, funded)
	}
	return p
}

func scheduleBody(from, to string, amount int64, startAt time.Time, extra string) string {
	return fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":%d,"currency":"USD","start_at":%q%s}`,
		from, to, amount, startAt.UTC().Format(time.RFC3339Nano), extra)
}

// schedule asks for a scheduled transfer of p's and returns it as the 201 showed it, and the
// request's body.
func (p parties) schedule(t *testing.T, e *testenv.Env, key string, amount int64, startAt time.Time, extra string) (map[string]any, string) {
	st, body, _ := p.scheduled(t, e, key, amount, startAt, extra)
	return st, body
}

func (p parties) scheduled(t *testing.T, e *testenv.Env, key string, amount int64, startAt time.Time, extra string) (map[string]any, string, testenv.Response) {
	t.Helper()
	body := scheduleBody(p.from, p.to, amount, startAt, extra)
	r := e.Do(t, "POST", "/v1/scheduled-transfers", p.alice, key, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("schedule: %d %s", r.Status, r.Body)
	}
	st := r.JSON(t)
	if st["status"] != "active" || r.Header.Get("Location") != "/v1/scheduled-transfers/"+st["id"].(string) {
		t.Fatalf("scheduled transfer %s (Location %q)", r.Body, r.Header.Get("Location"))
	}
	return st, body, r
}

// occurrences lists the transfers of scheduled transfer id, as key sees them, by occurrence number.
func occurrences(t *testing.T, e *testenv.Env, key, id string) map[int]map[string]any {
	t.Helper()
	r := e.Do(t, "GET", "/v1/transfers?limit=200&scheduled_transfer_id="+id, key, "", "")
	if r.Status != http.StatusOK {
		t.Fatalf("listing the occurrences: %d %s", r.Status, r.Body)
	}
	byN := map[int]map[string]any{}
	for _, tr := range r.JSON(t)["data"].([]any) {
		tr := tr.(map[string]any)
		n := int(tr["occurrence"].(float64))
		if _, twice := byN[n]; twice || tr["scheduled_transfer_id"] != id {
			t.Fatalf("occurrence %d listed twice, or of another schedule: %v", n, tr)
		}
		byN[n] = tr
	}
	return byN
}

func get(t *testing.T, e *testenv.Env, key, id string) map[string]any {
	t.Helper()
	r := e.Do(t, "GET", "/v1/scheduled-transfers/"+id, key, "", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)
}

// wantOccurrences holds the occurrences of st to statuses (occurrence n's is statuses[n-1]): each
// once, of the schedule's accounts and amount, under the workflow ID of its occurrence.
func wantOccurrences(t *testing.T, e *testenv.Env, p parties, st map[string]any, statuses ...string) {
	t.Helper()
	id := st["id"].(string)
	got := occurrences(t, e, p.alice, id)
	if len(got) != len(statuses) {
		t.Fatalf("%d occurrences, want %d: %v", len(got), len(statuses), got)
	}
	for i, want := range statuses {
		tr := got[i+1]
		if tr == nil || tr["status"] != want || tr["amount_minor"] != st["amount_minor"] || tr["from_account_id"] != p.from ||
			tr["to_account_id"] != p.to || tr["workflow_id"] != fmt.Sprintf("occurrence/%s/%s/%d", p.aliceID, id, i+1) {
			t.Fatalf("occurrence %d: %v, want %s", i+1, tr, want)
		}
	}
}

func wantBalances(t *testing.T, e *testenv.Env, what string, p parties, from, to int64) {
	t.Helper()
	if b, c := e.Balance(t, p.from), e.Balance(t, p.to); b != from || c != to {
		t.Fatalf("%s: balances %d and %d, want %d and %d", what, b, c, from, to)
	}
}

// Three occurrences two seconds apart: exactly three transfers, each once, none before it is
// due; the schedule completes, its answer replays, its events are in both feeds, Temporal shows
// it completed under ScheduledTransferStatus, and a cancellation after the end is refused.
func TestThreeOccurrencesMoveMoneyThreeTimes(t *testing.T) {
	p := newParties(t, env, 1_000)
	start := time.Now().UTC()
	st, body, first := p.scheduled(t, env, "rent", 100, start, `,"interval":"2s","count":3,"description":"rent","metadata":{"flat":"2b"}`)
	id := st["id"].(string)
	if st["workflow_id"] != "scheduled-transfer/"+p.aliceID+"/rent" || st["interval"] != "2s" || st["count"] != 3.0 ||
		st["occurrences"] != 0.0 || st["next_run_at"] == nil || st["metadata"].(map[string]any)["flat"] != "2b" || st["cancelled_at"] != nil {
		t.Fatalf("scheduled transfer %v", st)
	}
	again := env.Do(t, "POST", "/v1/scheduled-transfers", p.alice, "rent", body)
	if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
	if env.Settled(t, st["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the schedule's run did not complete")
	}
	done := get(t, env, p.bob, id)
	if done["status"] != "completed" || done["occurrences"] != 3.0 || done["next_run_at"] != nil || done["completed_at"] == nil {
		t.Fatalf("after the last occurrence: %v", done)
	}
	for _, tr := range occurrences(t, env, p.alice, id) {
		env.Settled(t, tr["workflow_id"].(string))
	}
	wantOccurrences(t, env, p, st, "completed", "completed", "completed")
	wantBalances(t, env, "after three occurrences", p, 700, 300)
	// None ran before it was due: a durable timer never fires early.
	for n, tr := range occurrences(t, env, p.alice, id) {
		created, _ := time.Parse(time.RFC3339Nano, tr["created_at"].(string))
		if due := start.Add(time.Duration(n-1) * 2 * time.Second); created.Before(due.Add(-time.Millisecond)) {
			t.Fatalf("occurrence %d was created at %v, before it was due at %v", n, created, due)
		}
	}
	for _, key := range []string{p.alice, p.bob} {
		for _, typ := range []string{"scheduled_transfer.created", "scheduled_transfer.completed"} {
			if !env.HasEvent(t, key, typ, id) {
				t.Fatalf("no %s event of %s in the feed", typ, id)
			}
		}
	}
	late := env.Do(t, "DELETE", "/v1/scheduled-transfers/"+id, p.alice, "", "")
	if late.Status != http.StatusUnprocessableEntity || late.JSON(t)["type"] != "/problems/scheduled-transfer-not-active" ||
		late.JSON(t)["scheduled_transfer_status"] != "completed" {
		t.Fatalf("cancelling a completed schedule: %d %s", late.Status, late.Body)
	}
	testenv.WaitFor(t, "the schedule completed in visibility", func() bool {
		resp, err := env.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s' AND ScheduledTransferStatus = 'completed'", st["workflow_id"])})
		return err == nil && len(resp.GetExecutions()) == 1
	})
	env.Reconcile(t)
}

// The same occurrence fired three times at once (as a catch-up, an overlap or a retry would),
// and once more by the schedule's own run when it is due: one transfer, which moves money once;
// every firing is answered with it.
func TestAnOccurrenceFiredTwiceMovesMoneyOnce(t *testing.T) {
	p := newParties(t, env, 1_000)
	st, _ := p.schedule(t, env, "twice", 250, time.Now().Add(3*time.Second), `,"interval":"1s","count":2`)
	id := st["id"].(string)
	ctx := context.Background()
	row, begun, err := env.Ledger.BeginOccurrence(ctx, id, 1) // as RunOccurrence does, ahead of the timer
	if err != nil || !begun {
		t.Fatalf("beginning occurrence 1: %v %v", begun, err)
	}
	var wg sync.WaitGroup
	fired := make([]activities.Occurred, 3)
	errs := make([]error, 3)
	for i := range fired {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fired[i], errs[i] = env.Schedules.SubmitOccurrence(ctx, row, 1)
		}()
	}
	wg.Wait()
	for i := range fired {
		if errs[i] != nil || fired[i].TransferID != fired[0].TransferID {
			t.Fatalf("firing %d: %+v %v (the first: %+v)", i, fired[i], errs[i], fired[0])
		}
	}
	if env.Settled(t, st["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the schedule's run did not complete")
	}
	for _, tr := range occurrences(t, env, p.alice, id) {
		env.Settled(t, tr["workflow_id"].(string))
	}
	wantOccurrences(t, env, p, st, "completed", "completed")
	if got := occurrences(t, env, p.alice, id)[1]["id"]; got != fired[0].TransferID {
		t.Fatalf("occurrence 1 is %v, the firings answered %s", got, fired[0].TransferID)
	}
	wantBalances(t, env, "after two occurrences, the first fired four times", p, 500, 500)
	// Fired again once its idempotency record has expired (the cleanup deleted it): the ledger
	// still knows the occurrence's transfer, and answers with it.
	if _, err := env.DB.Exec(ctx, `DELETE FROM idempotency_records WHERE route = $1 AND key = $2`,
		idempotency.RouteOccurrence, id+"/1"); err != nil {
		t.Fatal(err)
	}
	if late, err := env.Schedules.SubmitOccurrence(ctx, row, 1); err != nil || late.TransferID != fired[0].TransferID || late.TransferStatus != "completed" {
		t.Fatalf("occurrence 1 fired after its record expired: %+v %v", late, err)
	}
	wantOccurrences(t, env, p, st, "completed", "completed")
	wantBalances(t, env, "after occurrence 1 fired once more", p, 500, 500)
	if n := env.Count(t, `SELECT count(*) FROM entries e JOIN transfers t ON t.id = e.transfer_id WHERE t.scheduled_transfer_id = $1`, id); n != 4 {
		t.Fatalf("the two occurrences have %d entries, want 4", n)
	}
	env.Reconcile(t)
}

// A cancellation stops every occurrence not yet started: those started stay the transfers they
// are, none starts after it (even past their due times), the run ends at once; the payee cannot
// cancel, a second cancellation answers it as it stands, and both feeds have the event.
func TestCancelStopsTheRest(t *testing.T) {
	p := newParties(t, env, 1_000)
	st, _ := p.schedule(t, env, "weekly", 100, time.Now(), `,"interval":"2s","count":5`)
	id, path := st["id"].(string), "/v1/scheduled-transfers/"+st["id"].(string)
	testenv.WaitFor(t, "the first occurrence", func() bool { return len(occurrences(t, env, p.alice, id)) >= 1 })
	if r := env.Do(t, "DELETE", path, p.bob, "", ""); r.Status != http.StatusNotFound {
		t.Fatalf("the payee cancelling: %d %s", r.Status, r.Body)
	}
	r := env.Do(t, "DELETE", path, p.alice, "", "")
	cancelled := r.JSON(t)
	if r.Status != http.StatusOK || cancelled["status"] != "cancelled" || cancelled["next_run_at"] != nil || cancelled["cancelled_at"] == nil {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	started := int(cancelled["occurrences"].(float64))
	if env.Settled(t, st["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the schedule's run did not end")
	}
	time.Sleep(5 * time.Second) // past two more due times: none may start
	statuses := make([]string, started)
	for i := range statuses {
		statuses[i] = "completed"
	}
	for _, tr := range occurrences(t, env, p.alice, id) {
		env.Settled(t, tr["workflow_id"].(string))
	}
	wantOccurrences(t, env, p, st, statuses...)
	wantBalances(t, env, "after the cancellation", p, 1_000-int64(started)*100, int64(started)*100)
	if again := env.Do(t, "DELETE", path, p.alice, "", ""); again.Status != http.StatusOK || again.JSON(t)["status"] != "cancelled" ||
		again.JSON(t)["cancelled_at"] != cancelled["cancelled_at"] {
		t.Fatalf("cancelling again: %d %s", again.Status, again.Body)
	}
	if got := get(t, env, p.bob, id); got["status"] != "cancelled" || got["occurrences"] != float64(started) {
		t.Fatalf("after the cancellation: %v", got)
	}
	for _, key := range []string{p.alice, p.bob} {
		if !env.HasEvent(t, key, "scheduled_transfer.cancelled", id) {
			t.Fatal("no scheduled_transfer.cancelled event")
		}
	}
	env.Reconcile(t)
}

// An occurrence without the funds is a rejected transfer (its 422 stored, its event), and the
// schedule goes on: the next one, funded meanwhile, completes.
func TestAnOccurrenceWithoutFundsIsRejectedAndTheNextCompletes(t *testing.T) {
	p := newParties(t, env, 150)
	st, _ := p.schedule(t, env, "short", 100, time.Now(), `,"interval":"3s","count":3`)
	id := st["id"].(string)
	testenv.WaitFor(t, "the second occurrence to be refused", func() bool {
		tr := occurrences(t, env, p.alice, id)[2]
		return tr != nil && tr["status"] == "rejected"
	})
	env.Fund(t, p.from, 100)
	if env.Settled(t, st["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the schedule's run did not complete")
	}
	for _, tr := range occurrences(t, env, p.alice, id) {
		env.Settled(t, tr["workflow_id"].(string))
	}
	wantOccurrences(t, env, p, st, "completed", "rejected", "completed")
	wantBalances(t, env, "after a refused occurrence between two", p, 50, 200)
	rejected := occurrences(t, env, p.alice, id)[2]["id"].(string)
	if !env.HasEvent(t, p.alice, "transfer.rejected", rejected) {
		t.Fatal("no transfer.rejected event for the refused occurrence")
	}
	if got := get(t, env, p.alice, id); got["status"] != "completed" || got["occurrences"] != 3.0 {
		t.Fatalf("after the last occurrence: %v", got)
	}
	env.Reconcile(t)
}

// Bad requests change nothing: each is 400 naming the field (404 for another's account, 422 for
// another currency), and the same key then schedules the corrected request.
func TestBadSchedulesChangeNothing(t *testing.T) {
	p := newParties(t, env, 100)
	_, stranger := env.Owner(t)
	other := env.Account(t, stranger, "USD")
	euros := env.Account(t, p.bob, "EUR")
	later := time.Now().Add(time.Hour)
	for _, c := range []struct {
		body   string
		status int
		field  string
	}{
		{scheduleBody(p.from, p.to, 100, later, `,"interval":"500ms"`), 400, "interval"},
		{scheduleBody(p.from, p.to, 100, later, `,"interval":"soon"`), 400, "interval"},
		{scheduleBody(p.from, p.to, 100, later, `,"interval":"1.0005s"`), 400, "interval"},
		{scheduleBody(p.from, p.to, 100, later, `,"count":2`), 400, "count"},
		{scheduleBody(p.from, p.to, 100, later, `,"interval":"1s","count":0`), 400, "count"},
		{scheduleBody(p.from, p.to, 100, later, `,"interval":"1s","count":1.5`), 400, "count"},
		{scheduleBody(p.from, p.to, 100, later, `,"interval":"1s","every":"1s"`), 400, "every"},
		{scheduleBody(p.from, p.to, 0, later, ""), 400, "amount_minor"},
		{scheduleBody(p.from, p.to, 100, time.Now().Add(-time.Hour), ""), 400, "start_at"},
		{fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":1,"currency":"USD"}`, p.from, p.to), 400, "start_at"},
		{fmt.Sprintf(`{"from_account_id":%q,"to_account_id":%q,"amount_minor":1,"currency":"USD","start_at":"tomorrow"}`, p.from, p.to), 400, "start_at"},
		{scheduleBody(other, p.to, 100, later, ""), 404, ""},
		{scheduleBody(p.from, euros, 100, later, ""), 422, ""},
	} {
		r := env.Do(t, "POST", "/v1/scheduled-transfers", p.alice, "fixed", c.body)
		if r.Status != c.status {
			t.Fatalf("%s: %d %s", c.body, r.Status, r.Body)
		}
		if c.field != "" {
			errs, _ := r.JSON(t)["errors"].([]any)
			if len(errs) == 0 || errs[0].(map[string]any)["field"] != c.field {
				t.Fatalf("%s: %s, want an error on %s", c.body, r.Body, c.field)
			}
		}
	}
	if n := env.Count(t, `SELECT count(*) FROM scheduled_transfers WHERE from_account_id = $1`, p.from); n != 0 {
		t.Fatalf("bad requests stored %d scheduled transfers", n)
	}
	st, _ := p.schedule(t, env, "fixed", 100, later, "")
	if st["interval"] != nil || st["count"] != nil || st["next_run_at"] == nil {
		t.Fatalf("a scheduled transfer once: %v", st)
	}
	if r := env.Do(t, "DELETE", "/v1/scheduled-transfers/"+st["id"].(string), p.alice, "", ""); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	env.Settled(t, st["workflow_id"].(string))
	env.Reconcile(t)
}

// The caller's scheduled transfers are listed newest first, a page at a time, filtered by status,
// to the payer and the payee and nobody else; the occurrences' list takes only a schedule the
// caller sees.
func TestScheduledTransfersAreListed(t *testing.T) {
	p := newParties(t, env, 100)
	later := time.Now().Add(time.Hour)
	first, _ := p.schedule(t, env, "list-1", 10, later, `,"interval":"24h"`)
	second, _ := p.schedule(t, env, "list-2", 10, later, `,"interval":"24h"`)
	if r := env.Do(t, "DELETE", "/v1/scheduled-transfers/"+first["id"].(string), p.alice, "", ""); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	// The Temporal UI shows when the next occurrence runs: the run's current details.
	q, err := env.Temporal.QueryWorkflow(context.Background(), second["workflow_id"].(string), "", "__temporal_workflow_metadata") // internal.QueryTypeWorkflowMetadata: the UI reads it
	var meta sdkpb.WorkflowMetadata
	if err == nil {
		err = q.Get(&meta)
	}
	if want := "next: occurrence 1 at " + later.UTC().Format(time.RFC3339); err != nil || meta.GetCurrentDetails() != want {
		t.Fatalf("the run's current details: %q (%v), want %q", meta.GetCurrentDetails(), err, want)
	}
	list := func(key, query string) ([]any, any) {
		r := env.Do(t, "GET", "/v1/scheduled-transfers"+query, key, "", "")
		if r.Status != http.StatusOK {
			t.Fatalf("GET /v1/scheduled-transfers%s: %d %s", query, r.Status, r.Body)
		}
		body := r.JSON(t)
		return body["data"].([]any), body["next_cursor"]
	}
	for _, key := range []string{p.alice, p.bob} {
		page, cursor := list(key, "?limit=1")
		if len(page) != 1 || page[0].(map[string]any)["id"] != second["id"] || cursor == nil {
			t.Fatalf("first page: %v %v", page, cursor)
		}
		page, cursor = list(key, "?limit=1&cursor="+cursor.(string))
		if len(page) != 1 || page[0].(map[string]any)["id"] != first["id"] || cursor != nil {
			t.Fatalf("second page: %v %v", page, cursor)
		}
		if page, _ = list(key, "?status=cancelled"); len(page) != 1 || page[0].(map[string]any)["id"] != first["id"] {
			t.Fatalf("cancelled: %v", page)
		}
	}
	_, stranger := env.Owner(t)
	if page, _ := list(stranger, ""); len(page) != 0 {
		t.Fatalf("a stranger lists %v", page)
	}
	for _, q := range []string{"?scheduled_transfer_id=" + second["id"].(string), "?scheduled_transfer_id=st_none"} {
		if r := env.Do(t, "GET", "/v1/transfers"+q, stranger, "", ""); r.Status != http.StatusNotFound {
			t.Fatalf("a stranger's occurrences%s: %d %s", q, r.Status, r.Body)
		}
	}
	if r := env.Do(t, "GET", "/v1/scheduled-transfers?status=done", p.alice, "", ""); r.Status != http.StatusBadRequest {
		t.Fatalf("an unknown status: %d", r.Status)
	}
	if r := env.Do(t, "DELETE", "/v1/scheduled-transfers/"+second["id"].(string), p.alice, "", ""); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	env.Settled(t, first["workflow_id"].(string))
	env.Settled(t, second["workflow_id"].(string))
	env.Reconcile(t)
}

// The only worker stops after the first occurrence and stays away past the next two: nothing
// moves meanwhile. When a worker returns, the schedule's timers have fired: each missed
// occurrence runs once, in turn, and the schedule completes.
func TestMissedOccurrencesRunOnceWhenWorkersReturn(t *testing.T) {
	down := testenv.New(t, "payments_test_schedules_down", testenv.Options{NoWorker: true})
	first := down.NewWorker(nil)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	p := newParties(t, down, 1_000)
	start := time.Now()
	st, _ := p.schedule(t, down, "missed", 100, start, `,"interval":"2s","count":3`)
	id := st["id"].(string)
	testenv.WaitFor(t, "the first occurrence to complete", func() bool {
		tr := occurrences(t, down, p.alice, id)[1]
		return tr != nil && tr["status"] == "completed"
	})
	first.Stop()
	time.Sleep(time.Until(start.Add(4*time.Second)) + 2*time.Second) // past both other due times
	if got := occurrences(t, down, p.alice, id); len(got) != 1 {
		t.Fatalf("%d occurrences while no worker ran, want 1", len(got))
	}
	wantBalances(t, down, "while no worker ran", p, 900, 100)

	second := down.NewWorker(nil)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	if down.Settled(t, st["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the schedule's run did not complete")
	}
	for _, tr := range occurrences(t, down, p.alice, id) {
		down.Settled(t, tr["workflow_id"].(string))
	}
	wantOccurrences(t, down, p, st, "completed", "completed", "completed")
	wantBalances(t, down, "after the worker returned", p, 700, 300)
	if got := get(t, down, p.alice, id); got["status"] != "completed" || got["occurrences"] != 3.0 {
		t.Fatalf("after the worker returned: %v", got)
	}
	down.Reconcile(t)
}

// TestRecordHistories writes a real history of every path of the ScheduledTransfer workflow
// (completed after two occurrences, once, cancelled while waiting, activated through an API
// without a worker, its answer asked by Update), which workflows' tests replay against every
// later change. Run it when the workflow changes, with a new version suffix
// (testenv.RecordCommand).
func TestRecordHistories(t *testing.T) {
	testenv.SkipUnlessRecording(t)
	p := newParties(t, env, 1_000)
	wf := func(key string) string { return "scheduled-transfer/" + p.aliceID + "/" + key }
	now := time.Now()
	p.schedule(t, env, "rec-completed", 10, now, `,"interval":"1s","count":2`)
	p.schedule(t, env, "rec-once", 10, now, "")
	cancelled, _ := p.schedule(t, env, "rec-cancelled", 10, now.Add(time.Hour), `,"interval":"1h"`)
	if r := env.Do(t, "DELETE", "/v1/scheduled-transfers/"+cancelled["id"].(string), p.alice, "", ""); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	split := env.With(t, testenv.Options{Split: true})
	p.schedule(t, split, "rec-asked", 10, now, "")
	for _, path := range []string{"completed", "once", "cancelled", "asked"} {
		env.Settled(t, wf("rec-"+path))
		env.RecordHistory(t, testenv.ScheduledHistory, path, wf("rec-"+path), "")
	}
}

// Through an API without a worker in its process (`payments api`), the 201 is asked of the run
// by Update and replayed as stored; its one occurrence (no interval) completes, and a duplicate
// sent to the other API shape gets the same bytes.
func TestOnceThroughAnAPIWithoutAWorker(t *testing.T) {
	split := env.With(t, testenv.Options{Split: true})
	p := newParties(t, split, 500)
	st, body, first := p.scheduled(t, split, "once", 200, time.Now(), `,"description":"one-off"`)
	if st["interval"] != nil || st["count"] != nil || st["description"] != "one-off" {
		t.Fatalf("a scheduled transfer once: %v", st)
	}
	if env.Settled(t, st["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the schedule's run did not complete")
	}
	for _, tr := range occurrences(t, split, p.alice, st["id"].(string)) {
		env.Settled(t, tr["workflow_id"].(string))
	}
	wantOccurrences(t, split, p, st, "completed")
	wantBalances(t, split, "after the one occurrence", p, 300, 200)
	for _, api := range []*testenv.Env{split, env} {
		again := api.Do(t, "POST", "/v1/scheduled-transfers", p.alice, "once", body)
		if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %s", again.Status, again.Body)
		}
	}
	env.Reconcile(t)
}

// abandon claims a scheduled transfer of p's under key as the API does before it starts its
// run, as if the API died between the two, and returns its request's body, scope and ID.
func (p parties) abandon(t *testing.T, key string, amount int64, startAt time.Time) (string, idempotency.Scope, string) {
	t.Helper()
	ctx := context.Background()
	body := scheduleBody(p.from, p.to, amount, startAt, "")
	req, sch, fp, err := request.DecodeScheduledTransfer([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	scope := idempotency.Scope{OwnerID: p.aliceID, Route: idempotency.RouteScheduledTransfers, Key: key}
	id := scope.ScheduledTransferID(0)
	if err := env.Ledger.InTx(ctx, func(tx pgx.Tx) error {
		if _, _, err := idempotency.Claim(ctx, tx, scope, fp, id); err != nil {
			return err
		}
		return ledger.InsertScheduledTransfer(ctx, tx, ledger.ScheduledTransfer{ID: id, OwnerID: p.aliceID,
			FromAccountID: req.FromAccountID, ToAccountID: req.ToAccountID, AmountMinor: req.AmountMinor, Currency: req.Currency,
			StartAt: sch.StartAt, WorkflowID: scope.WorkflowID()})
	}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, env, p.alice, id); got["status"] != "pending" || got["next_run_at"] == nil {
		t.Fatalf("the abandoned claim: %v", got)
	}
	return body, scope, id
}

// wantOneOccurrence waits for the run of scheduled transfer id and holds it to one completed
// occurrence of amount.
func (p parties) wantOneOccurrence(t *testing.T, scope idempotency.Scope, id string, funded, amount int64) {
	t.Helper()
	if env.Settled(t, scope.WorkflowID()) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the schedule's run did not complete")
	}
	st := get(t, env, p.alice, id)
	for _, tr := range occurrences(t, env, p.alice, id) {
		env.Settled(t, tr["workflow_id"].(string))
	}
	wantOccurrences(t, env, p, st, "completed")
	wantBalances(t, env, "after the one occurrence", p, funded-amount, amount)
}

// A claim left without its run (the API died between the claim and the start) is started by
// the recovery pass: the schedule activates, its occurrence runs once, and the client's retry is
// answered with the 201 the run stored.
func TestAClaimLeftWithoutItsRunIsStartedByTheRecoveryPass(t *testing.T) {
	p := newParties(t, env, 500)
	body, scope, id := p.abandon(t, "abandoned", 120, time.Now())
	tally, err := env.Schedules.ResolveStale(context.Background(), 0)
	if err != nil || tally.Started < 1 {
		t.Fatalf("the recovery pass: %+v %v", tally, err)
	}
	p.wantOneOccurrence(t, scope, id, 500, 120)
	retry := env.Do(t, "POST", "/v1/scheduled-transfers", p.alice, "abandoned", body)
	if retry.Status != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" || retry.JSON(t)["id"] != id {
		t.Fatalf("the client's retry: %d %s", retry.Status, retry.Body)
	}
	env.Reconcile(t)
}

// Only a new request is held to start_at: a retry that arrives after start_at's slack has
// passed, while its first attempt's claim has no answer stored yet, is answered as the first
// would have been (the run it starts activates the schedule, whose one occurrence, already due,
// runs once), not refused 400 for a schedule that is claimed and will run.
func TestARetryAfterStartAtOfAClaimedScheduleIsAnsweredAsItsRun(t *testing.T) {
	p := newParties(t, env, 500)
	body, scope, id := p.abandon(t, "late-retry", 130, time.Now().Add(-request.StartAtSlack-time.Minute))
	retry := env.Do(t, "POST", "/v1/scheduled-transfers", p.alice, "late-retry", body)
	if retry.Status != http.StatusCreated || retry.JSON(t)["id"] != id {
		t.Fatalf("the client's late retry: %d %s", retry.Status, retry.Body)
	}
	p.wantOneOccurrence(t, scope, id, 500, 130)
	again := env.Do(t, "POST", "/v1/scheduled-transfers", p.alice, "late-retry", body)
	if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || again.JSON(t)["id"] != id {
		t.Fatalf("a retry after the answer was stored: %d %s", again.Status, again.Body)
	}
	fresh := env.Do(t, "POST", "/v1/scheduled-transfers", p.alice, "late-new", body)
	if fresh.Status != http.StatusBadRequest {
		t.Fatalf("a new request with the same past start_at: %d %s", fresh.Status, fresh.Body)
	}
	wantBalances(t, env, "after the new request was refused", p, 370, 130)
	env.Reconcile(t)
}
