package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/rig/testenv"
)

// paid makes a transfer of amount from a payer (alice) to a payee (bob) and returns the
// transfer id, both keys and both accounts.
func paid(t *testing.T, amount int64) (transferID, alice, bob, from, to string) {
	t.Helper()
	_, alice = env.Owner(t)
	_, bob = env.Owner(t)
	from, to = env.Account(t, alice, "USD"), env.Account(t, bob, "USD")
	env.Fund(t, from, amount)
	r := env.Do(t, "POST", "/v1/transfers", alice, "pay", testenv.TransferBody(from, to, amount))
	if r.Status != http.StatusCreated {
		t.Fatalf("transfer: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string), alice, bob, from, to
}

func refundPath(transferID string) string { return "/v1/transfers/" + transferID + "/refunds" }

// refundedMinor is what GET shows of a transfer's refunds, and what the ledger's completed
// refunds of it add up to.
func refundedMinor(t *testing.T, key, transferID string) (shown, posted int64) {
	t.Helper()
	tr := env.Do(t, "GET", "/v1/transfers/"+transferID, key, "", "").JSON(t)
	shown = int64(tr["amount_refunded_minor"].(float64))
	posted = int64(env.Count(t, `SELECT COALESCE(sum(amount_minor), 0) FROM transfers
		WHERE refund_of = $1 AND status = 'completed'`, transferID))
	return shown, posted
}

// A partial refund, then the rest: each moves money back once, with its two entries, replays
// byte for byte, is linked to the transfer, and shows in both owners' events; once nothing
// remains, a refund is refused and changes nothing.
func TestRefundsGiveMoneyBackOnce(t *testing.T) {
	transferID, alice, bob, from, to := paid(t, 1_000)

	first := env.Do(t, "POST", refundPath(transferID), bob, "refund-1", `{"amount_minor":300,"description":"damaged","metadata":{"case":"C-42"}}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("refund: %d %s", first.Status, first.Body)
	}
	rf := first.JSON(t)
	id := rf["id"].(string)
	if rf["transfer_id"] != transferID || rf["status"] != "completed" || rf["amount_minor"] != 300.0 ||
		rf["currency"] != "USD" || first.Header.Get("Location") != "/v1/refunds/"+id {
		t.Fatalf("refund %s (Location %q)", first.Body, first.Header.Get("Location"))
	}
	if env.Settled(t, rf["workflow_id"].(string)) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatal("the refund's workflow did not complete")
	}
	// The same request, members reordered: the first answer again.
	again := env.Do(t, "POST", refundPath(transferID), bob, "refund-1", `{"metadata":{"case":"C-42"},"description":"damaged","amount_minor":300}`)
	if again.Status != first.Status || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
	if env.Balance(t, from) != 300 || env.Balance(t, to) != 700 {
		t.Fatalf("balances %d/%d after refunding 300 of 1000", env.Balance(t, from), env.Balance(t, to))
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1 AND
		((account_id = $2 AND amount_minor = -300) OR (account_id = $3 AND amount_minor = 300))`, id, to, from); n != 2 {
		t.Fatalf("the refund has %d of its two entries", n)
	}

	// The rest, amount left out.
	rest := env.Do(t, "POST", refundPath(transferID), bob, "refund-2", `{}`)
	if rest.Status != http.StatusCreated || rest.JSON(t)["amount_minor"] != 700.0 {
		t.Fatalf("refund of the rest: %d %s", rest.Status, rest.Body)
	}
	if shown, posted := refundedMinor(t, alice, transferID); shown != 1_000 || posted != 1_000 {
		t.Fatalf("amount_refunded_minor %d, completed refunds %d; want 1000", shown, posted)
	}
	// Nothing remains: refused before anything is claimed, and not stored.
	for _, body := range []string{`{}`, `{"amount_minor":1}`} {
		over := env.Do(t, "POST", refundPath(transferID), bob, "refund-3", body)
		if over.Status != http.StatusUnprocessableEntity || over.JSON(t)["type"] != "/problems/refund-exceeds-transfer" {
			t.Fatalf("refund past the amount: %d %s", over.Status, over.Body)
		}
	}
	if env.Balance(t, from) != 1_000 || env.Balance(t, to) != 0 || env.Count(t, `SELECT count(*) FROM transfers WHERE refund_of = $1`, transferID) != 2 {
		t.Fatal("a refused refund changed the ledger")
	}

	// Both owners see the refund and its event; the payer cannot refund.
	for _, key := range []string{alice, bob} {
		got := env.Do(t, "GET", "/v1/refunds/"+id, key, "", "")
		if got.Status != http.StatusOK || got.JSON(t)["status"] != "completed" {
			t.Fatalf("GET refund: %d %s", got.Status, got.Body)
		}
		if !env.HasEvent(t, key, "refund.completed", id) {
			t.Fatalf("no refund.completed event of %s in the feed", id)
		}
	}
	if r := env.Do(t, "POST", refundPath(transferID), alice, "mine", `{"amount_minor":1}`); r.Status != http.StatusNotFound {
		t.Fatalf("the payer refunding: %d %s", r.Status, r.Body)
	}
	_, stranger := env.Owner(t)
	if r := env.Do(t, "GET", "/v1/refunds/"+id, stranger, "", ""); r.Status != http.StatusNotFound {
		t.Fatalf("a stranger reading the refund: %d", r.Status)
	}
	env.Reconcile(t)
}

// Fifty refunds race for the last 100 units of a transfer, all at once: exactly as many complete
// as fit (14 of 7 units), and every other one is refused with refund-exceeds-transfer. A refusal
// decided in the ledger (the refund had passed the API's check, and another took the units
// first) is final, stored and replayed; one decided before the claim is not stored. Nothing
// moves twice, and the transfer never gives back more than it moved. (The ledger's side of the
// race, every refund reaching the posting at once, is TestConcurrentRefundsInTheLedger.)
func TestConcurrentPartialRefundsNeverExceedTheTransfer(t *testing.T) {
	transferID, _, bob, from, to := paid(t, 1_000)
	if r := env.Do(t, "POST", refundPath(transferID), bob, "most", `{"amount_minor":900}`); r.Status != http.StatusCreated {
		t.Fatalf("first refund: %d %s", r.Status, r.Body)
	}

	const n = 50
	answers := make([]testenv.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = env.Do(t, "POST", refundPath(transferID), bob, fmt.Sprintf("race-%d", i), `{"amount_minor":7}`)
		})
	}
	wg.Wait()

	completed, inLedger, beforeClaim := 0, 0, 0
	for i, a := range answers {
		a = settled(t, a, func() testenv.Response {
			return env.Do(t, "POST", refundPath(transferID), bob, fmt.Sprintf("race-%d", i), `{"amount_minor":7}`)
		})
		p := a.JSON(t)
		switch {
		case a.Status == http.StatusCreated:
			completed++
		case a.Status == http.StatusUnprocessableEntity && p["type"] == "/problems/refund-exceeds-transfer" && p["refund_id"] != nil:
			inLedger++
			replay := env.Do(t, "POST", refundPath(transferID), bob, fmt.Sprintf("race-%d", i), `{"amount_minor":7}`)
			if string(replay.Body) != string(a.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("a refusal in the ledger is not replayed: %s / %s", a.Body, replay.Body)
			}
		case a.Status == http.StatusUnprocessableEntity && p["type"] == "/problems/refund-exceeds-transfer":
			beforeClaim++
		default:
			t.Fatalf("refund %d: %d %s", i, a.Status, a.Body)
		}
	}
	t.Logf("%d completed, %d refused in the ledger, %d refused before their claim", completed, inLedger, beforeClaim)
	if completed != 14 || inLedger+beforeClaim != n-14 {
		t.Fatalf("%d completed and %d refused; want 14 and %d", completed, inLedger+beforeClaim, n-14)
	}
	if refunds := env.Count(t, `SELECT count(*) FROM transfers WHERE refund_of = $1`, transferID); refunds != 1+14+inLedger {
		t.Fatalf("%d refunds in the ledger, want the first, 14 completed and %d rejected", refunds, inLedger)
	}
	if shown, posted := refundedMinor(t, bob, transferID); shown != 998 || posted != 998 {
		t.Fatalf("amount_refunded_minor %d, completed refunds %d; want 998", shown, posted)
	}
	if env.Balance(t, from) != 998 || env.Balance(t, to) != 2 {
		t.Fatalf("balances %d/%d, want 998/2", env.Balance(t, from), env.Balance(t, to))
	}
	env.Reconcile(t)
}

// settled is a's final answer: while a is 202 (the wait ran out) or 409 (the key's run is still
// going), it asks again, with again (the same request under the same key), for at most a minute.
func settled(t *testing.T, a testenv.Response, again func() testenv.Response) testenv.Response {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for a.Status == http.StatusAccepted || a.Status == http.StatusConflict {
		if time.Now().After(deadline) {
			t.Fatalf("still %d after a minute: %s", a.Status, a.Body)
		}
		time.Sleep(50 * time.Millisecond)
		a = again()
	}
	return a
}

// The payee refunds 60 of a transfer of 100 and, a moment later, all that remains: the second
// takes the 40 the first left, not the 100 that remained when it was claimed. Both reach their
// posting before either has posted: the payee's account is held, so the first posting waits
// there, holding the transfer's lock, and the second, claimed meanwhile, waits behind it.
func TestARefundOfAllThatRemainsTakesWhatTheRefundsBeforeItLeft(t *testing.T) {
	transferID, alice, bob, from, to := paid(t, 100)
	release := env.Hold(t, to)
	bodies := []string{`{"amount_minor":60}`, `{}`}
	send := func(i int) testenv.Response {
		return env.Do(t, "POST", refundPath(transferID), bob, fmt.Sprintf("part-%d", i), bodies[i])
	}
	answers := make([]testenv.Response, len(bodies))
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Go(func() { answers[i] = send(i) })
		testenv.WaitFor(t, fmt.Sprintf("refund %d's posting to wait for its lock", i), func() bool { return env.Waiting(t) == i+1 })
	}
	release()
	wg.Wait()

	var ids []string
	for i, want := range []float64{60, 40} {
		a := settled(t, answers[i], func() testenv.Response { return send(i) })
		if a.Status != http.StatusCreated || a.JSON(t)["amount_minor"] != want || a.JSON(t)["status"] != "completed" {
			t.Fatalf("refund %s: %d %s, want %v completed", bodies[i], a.Status, a.Body, want)
		}
		if replay := send(i); string(replay.Body) != string(a.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay of %s: %s, want %s", bodies[i], replay.Body, a.Body)
		}
		ids = append(ids, a.JSON(t)["id"].(string))
	}
	if shown, posted := refundedMinor(t, alice, transferID); shown != 100 || posted != 100 {
		t.Fatalf("amount_refunded_minor %d, completed refunds %d; want 100", shown, posted)
	}
	if env.Balance(t, from) != 100 || env.Balance(t, to) != 0 {
		t.Fatalf("balances %d/%d, want 100/0", env.Balance(t, from), env.Balance(t, to))
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE transfer_id = $1 AND
		((account_id = $2 AND amount_minor = -40) OR (account_id = $3 AND amount_minor = 40))`, ids[1], to, from); n != 2 {
		t.Fatalf("the refund of the rest has %d of its two entries of 40", n)
	}
	env.Reconcile(t)
}

// Only a completed transfer between customers' accounts is refundable, and only by its payee;
// those refusals come before any claim and are not stored. A refund the ledger refuses (the
// payee no longer has the money) is final, stored and replayed, as a transfer's is. A key is
// bound to one refund of one transfer.
func TestRefundRefusals(t *testing.T) {
	transferID, _, bob, _, to := paid(t, 1_000)
	expect := func(r testenv.Response, status int, typ string) map[string]any {
		t.Helper()
		if r.Status != status || r.JSON(t)["type"] != "/problems/"+typ {
			t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, status, typ)
		}
		return r.JSON(t)
	}
	// The payee spends the money; a refund of it is insufficient-funds, final, and moves nothing.
	other := env.Account(t, bob, "USD")
	env.Fund(t, other, 1)
	if r := env.Do(t, "POST", "/v1/transfers", bob, "spend", testenv.TransferBody(to, other, 950)); r.Status != http.StatusCreated {
		t.Fatalf("spend: %d %s", r.Status, r.Body)
	}
	poor := env.Do(t, "POST", refundPath(transferID), bob, "r", `{"amount_minor":100}`)
	p := expect(poor, http.StatusUnprocessableEntity, "insufficient-funds")
	if p["refund_id"] == nil || p["transfer_id"] != transferID {
		t.Fatalf("the refusal names no refund: %s", poor.Body)
	}
	if again := env.Do(t, "POST", refundPath(transferID), bob, "r", `{"amount_minor":100}`); string(again.Body) != string(poor.Body) {
		t.Fatalf("the refusal is not replayed: %s", again.Body)
	}
	rf := env.Do(t, "GET", "/v1/refunds/"+p["refund_id"].(string), bob, "", "").JSON(t)
	if rf["status"] != "rejected" || rf["failure_reason"] == nil {
		t.Fatalf("the refused refund reads %v", rf)
	}
	if shown, posted := refundedMinor(t, bob, transferID); shown != 0 || posted != 0 || env.Balance(t, to) != 50 {
		t.Fatal("a refund without funds moved money")
	}
	// The same key for another amount, or another transfer: reused.
	expect(env.Do(t, "POST", refundPath(transferID), bob, "r", `{"amount_minor":99}`), http.StatusUnprocessableEntity, "idempotency-key-reused")
	otherTransfer, _, _, _, _ := paid(t, 10)
	expect(env.Do(t, "POST", refundPath(otherTransfer), bob, "r", `{"amount_minor":100}`), http.StatusUnprocessableEntity, "idempotency-key-reused")

	// Not the payee's, rejected, a deposit, a refund's id, unknown: not found or not refundable.
	expect(env.Do(t, "POST", refundPath(otherTransfer), bob, "r1", `{}`), http.StatusNotFound, "not-found")
	rejected := env.Do(t, "POST", "/v1/transfers", bob, "too-much", testenv.TransferBody(other, to, 1_000_000))
	rejectedID := expect(rejected, http.StatusUnprocessableEntity, "insufficient-funds")["transfer_id"].(string)
	expect(env.Do(t, "POST", refundPath(rejectedID), bob, "r2", `{}`), http.StatusUnprocessableEntity, "transfer-not-refundable")
	var deposit string
	if err := env.DB.QueryRow(context.Background(), `SELECT transfer_id FROM entries WHERE account_id = $1 ORDER BY id LIMIT 1`, other).Scan(&deposit); err != nil {
		t.Fatal(err)
	}
	expect(env.Do(t, "POST", refundPath(deposit), bob, "r3", `{}`), http.StatusUnprocessableEntity, "transfer-not-refundable")
	expect(env.Do(t, "POST", refundPath(p["refund_id"].(string)), bob, "r4", `{}`), http.StatusNotFound, "not-found")
	expect(env.Do(t, "POST", refundPath("tr_nope"), bob, "r5", `{}`), http.StatusNotFound, "not-found")
	expect(env.Do(t, "POST", refundPath(transferID), bob, "r6", `{"amount_minor":0}`), http.StatusBadRequest, "invalid-request")
	expect(env.Do(t, "POST", refundPath(transferID), bob, "r6", `{"amount_minor":1,"transfer_id":"x"}`), http.StatusBadRequest, "invalid-request")
	expect(env.Do(t, "POST", refundPath(transferID), bob, "", `{}`), http.StatusBadRequest, "missing-idempotency-key")
	if n := env.Count(t, `SELECT count(*) FROM transfers WHERE refund_of IN ($1, $2, $3, $4)`, transferID, rejectedID, deposit, otherTransfer); n != 1 {
		t.Fatalf("%d refunds, want only the one refused for funds", n)
	}

	// With the money back, a refund under a new key goes through; r6, refused before its claim,
	// can be used again.
	if r := env.Do(t, "POST", "/v1/transfers", bob, "back", testenv.TransferBody(other, to, 900)); r.Status != http.StatusCreated {
		t.Fatalf("back: %d %s", r.Status, r.Body)
	}
	if r := env.Do(t, "POST", refundPath(transferID), bob, "r6", `{"amount_minor":100}`); r.Status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	if shown, posted := refundedMinor(t, bob, transferID); shown != 100 || posted != 100 {
		t.Fatalf("amount_refunded_minor %d, completed refunds %d; want 100", shown, posted)
	}
	env.Reconcile(t)
}

// A refund whose run fails after its retries answers 500 refund-failed, moved nothing, and reads
// failed; the same key runs it again, once.
func TestFailedRefundIsRunAgainByTheSameKey(t *testing.T) {
	transferID, _, bob, from, to := paid(t, 1_000)
	impatient := env.With(t, testenv.Options{RetryFor: time.Second})
	release := env.Hold(t, to) // the refund's posting cannot get its locks until the run gives up

	failed := impatient.Do(t, "POST", refundPath(transferID), bob, "fails", `{"amount_minor":400}`)
	p := failed.JSON(t)
	if failed.Status != http.StatusInternalServerError || p["type"] != "/problems/refund-failed" || p["refund_id"] == nil ||
		p["workflow_id"] == nil {
		t.Fatalf("failed run: %d %s", failed.Status, failed.Body)
	}
	id := p["refund_id"].(string)
	if got := env.Do(t, "GET", "/v1/refunds/"+id, bob, "", "").JSON(t); got["status"] != "failed" {
		t.Fatalf("refund status %v, want failed", got["status"])
	}
	if shown, posted := refundedMinor(t, bob, transferID); shown != 0 || posted != 0 || env.Balance(t, to) != 1_000 {
		t.Fatal("a failed refund moved money")
	}

	release()
	again := env.Do(t, "POST", refundPath(transferID), bob, "fails", `{"amount_minor":400}`)
	if again.Status != http.StatusCreated || again.JSON(t)["id"] != id {
		t.Fatalf("re-run: %d %s", again.Status, again.Body)
	}
	if shown, posted := refundedMinor(t, bob, transferID); shown != 400 || posted != 400 || env.Balance(t, from) != 400 {
		t.Fatalf("after the re-run: refunded %d (refunds %d), payer %d", shown, posted, env.Balance(t, from))
	}
	env.Reconcile(t)
}
