package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/rig/testenv"
)

var l *ledger.Ledger

// ttl is PAYMENTS_IDEMPOTENCY_TTL's default, which every reconcile of these tests uses.
const ttl = 24 * time.Hour

func TestMain(m *testing.M) {
	ctx := context.Background()
	url, err := testenv.FreshDatabase(ctx, "payments_test_ledger")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pool, err := database.Open(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	l = &ledger.Ledger{DB: pool}
	code := m.Run()
	// Whatever the tests did, the ledger they leave behind must reconcile, with the TTL the
	// service runs with by default.
	if eventsLeftOut {
		fmt.Fprintln(os.Stderr, "BenchmarkPost's baseline without events ran: the ledger is not reconciled")
	} else if report, err := ledger.Reconcile(ctx, pool, ttl, nil); err != nil || !report.OK() {
		report.Print(os.Stderr)
		fmt.Fprintln(os.Stderr, "the ledger tests left an unreconciled ledger", err)
		code = 1
	}
	pool.Close()
	os.Exit(code)
}

func account(t testing.TB, currency string, balance int64) string {
	t.Helper()
	return accountOf(t, t.Name(), currency, balance)
}

// accountOf is an account of the owner named owner, with balance deposited in it.
func accountOf(t testing.TB, owner, currency string, balance int64) string {
	t.Helper()
	ctx := context.Background()
	owner, err := auth.EnsureOwner(ctx, l.DB, owner)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), owner, currency, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if balance > 0 {
		deposit(t, acc.ID, balance)
	}
	return acc.ID
}

// deposit puts amount into account id, as `payments deposit` does.
func deposit(t testing.TB, id string, amount int64) {
	t.Helper()
	acc, err := l.Account(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	scope := idempotency.Scope{OwnerID: acc.OwnerID, Route: idempotency.RouteDeposit, Key: ledger.NewID("k")}
	p := ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(), From: money.FundingAccountID(acc.Currency),
		To: id, AmountMinor: amount, Currency: acc.Currency, Scope: scope}
	if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
}

// refund is a refund of amount of transfer t made under a scope of its own, as the API would
// make it for the owner of t's destination.
func refund(t ledger.Posting, amount int64) ledger.Posting {
	p := posting(t.To, t.From, amount)
	p.Scope.Route = idempotency.RouteRefunds
	p.TransferID, p.WorkflowID = p.Scope.RefundID(0), p.Scope.WorkflowID()
	p.Kind, p.RefundOf = ledger.KindRefund, t.TransferID
	return p
}

// A refund moves money back once, however often it is posted; refunds take no more than the
// transfer moved, and only from money the payee still has; a refund that does not reverse its
// transfer is a bug, refused.
func TestRefundsPostWithinTheTransfer(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	tr := posting(a, b, 600)
	if _, _, err := l.Post(ctx, tr, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	first := refund(tr, 400)
	for range 2 {
		r, resp, err := l.Post(ctx, first, api.TransferAnswer)
		if err != nil || r.Status != ledger.TransferCompleted || resp.Status != 201 || r.RefundOf == nil || *r.RefundOf != tr.TransferID {
			t.Fatalf("refund: %+v %d %v", r, resp.Status, err)
		}
	}
	over := refund(tr, 201)
	if r, resp, err := l.Post(ctx, over, api.TransferAnswer); err != nil || r.Status != ledger.TransferRejected ||
		*r.FailureReason != ledger.ReasonRefundExceeds || resp.Status != 422 {
		t.Fatalf("refund past the amount: %+v %d %v", r, resp.Status, err)
	}
	moved, err := l.Transfer(ctx, "", tr.TransferID)
	if err != nil || moved.AmountRefundedMinor != 400 {
		t.Fatalf("amount refunded %d, want 400 (%v)", moved.AmountRefundedMinor, err)
	}
	if balance(t, a) != 800 || balance(t, b) != 200 {
		t.Fatalf("balances %d/%d, want 800/200", balance(t, a), balance(t, b))
	}
	wrong := refund(tr, 1)
	wrong.From, wrong.To = wrong.To, wrong.From // not the reverse of the transfer
	if _, _, err := l.Post(ctx, wrong, api.TransferAnswer); !errors.Is(err, ledger.ErrInvalidPosting) {
		t.Fatalf("a refund in the transfer's direction: %v, want ErrInvalidPosting", err)
	}
	if _, err := l.Requested(ctx, wrong.TransferID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused refund was written: %v", err)
	}
}

// A refund of all that remains, claimed while 100 remained, takes what remains when it posts:
// the 40 a refund of 60 claimed after it but posted first left. Its run's input holds only the
// amount of its claim; the claimed row says it takes the rest. Its answer is stored and
// replayed. Claimed when nothing remains any more, it is rejected as exceeding the transfer,
// final, and moves nothing.
func TestARefundOfAllThatRemainsTakesWhatRemainsWhenItPosts(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 100), account(t, "USD", 0)
	tr := posting(a, b, 100)
	if _, _, err := l.Post(ctx, tr, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	claim := func(amount int64) ledger.Posting { // claimed as the API claims it; posted as its run posts it
		t.Helper()
		r := refund(tr, amount)
		r.RefundRemaining = true
		if err := ledger.InsertPending(ctx, l.DB, r); err != nil {
			t.Fatal(err)
		}
		r.RefundRemaining = false
		return r
	}
	rest := claim(100)
	if r, _, err := l.Post(ctx, refund(tr, 60), api.TransferAnswer); err != nil || r.Status != ledger.TransferCompleted {
		t.Fatalf("refund of 60: %+v %v", r, err)
	}
	r, resp, err := l.Post(ctx, rest, api.TransferAnswer)
	if err != nil || r.Status != ledger.TransferCompleted || r.AmountMinor != 40 || resp.Status != 201 {
		t.Fatalf("refund of the rest: %+v %d %s %v; want 40 completed", r, resp.Status, resp.Body, err)
	}
	var answered struct {
		AmountMinor int64 `json:"amount_minor"`
	}
	if err := json.Unmarshal(resp.Body, &answered); err != nil || answered.AmountMinor != 40 {
		t.Fatalf("the answer %s says %d, want 40 (%v)", resp.Body, answered.AmountMinor, err)
	}
	if _, again, err := l.Post(ctx, rest, api.TransferAnswer); err != nil || string(again.Body) != string(resp.Body) {
		t.Fatalf("posted again: %s %v, want the stored %s", again.Body, err, resp.Body)
	}
	if n := countEntries(t, rest.TransferID, b, -40) + countEntries(t, rest.TransferID, a, 40); n != 2 {
		t.Fatalf("the rest has %d of its two entries of 40", n)
	}

	none := claim(100)
	r, resp, err = l.Post(ctx, none, api.TransferAnswer)
	if err != nil || r.Status != ledger.TransferRejected || r.FailureReason == nil || *r.FailureReason != ledger.ReasonRefundExceeds || resp.Status != 422 {
		t.Fatalf("a refund of the rest when nothing remains: %+v %d %v", r, resp.Status, err)
	}
	if stored, err := ledger.StoredAnswer(ctx, l.DB, none.Scope, r, api.TransferAnswer); err != nil || string(stored.Body) != string(resp.Body) {
		t.Fatalf("the refusal is not stored: %s %v", stored.Body, err)
	}
	moved, err := l.Transfer(ctx, "", tr.TransferID)
	if err != nil || moved.AmountRefundedMinor != 100 || entries(t, none.TransferID) != 0 {
		t.Fatalf("refunded %d (%v), %d entries of the refused one; want 100 and 0", moved.AmountRefundedMinor, err, entries(t, none.TransferID))
	}
	if balance(t, a) != 100 || balance(t, b) != 0 {
		t.Fatalf("balances %d/%d, want 100/0", balance(t, a), balance(t, b))
	}
}

// countEntries counts the entries of transferID on account of amount.
func countEntries(t *testing.T, transferID, account string, amount int64) int {
	t.Helper()
	var n int
	if err := l.DB.QueryRow(context.Background(), `SELECT count(*) FROM entries WHERE transfer_id = $1 AND account_id = $2
		AND amount_minor = $3`, transferID, account, amount).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// posting is a USD transfer made under a scope of its own, as the API would make it for the
// owner of from.
func posting(from, to string, amount int64) ledger.Posting {
	acc, err := l.Account(context.Background(), "", from)
	if err != nil {
		panic(err)
	}
	scope := idempotency.Scope{OwnerID: acc.OwnerID, Route: idempotency.RouteTransfers, Key: ledger.NewID("k")}
	return ledger.Posting{TransferID: scope.TransferID(0), WorkflowID: scope.WorkflowID(), From: from, To: to,
		AmountMinor: amount, Currency: "USD", Scope: scope}
}

// Fifty refunds of one transfer reach the posting at once, racing for its last 100 units: the
// transfer's row lock takes them one after the other, so exactly 14 of 7 units complete, the
// other 36 are rejected for exceeding it, and the total refunded is 98.
func TestConcurrentRefundsInTheLedger(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	tr := posting(a, b, 1_000)
	if _, _, err := l.Post(ctx, tr, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Post(ctx, refund(tr, 900), api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	const n = 50
	statuses := make([]ledger.TransferStatus, n)
	reasons := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, _, err := l.Post(ctx, refund(tr, 7), api.TransferAnswer)
			if err != nil {
				t.Error(err)
				return
			}
			statuses[i] = r.Status
			if r.FailureReason != nil {
				reasons[i] = *r.FailureReason
			}
		})
	}
	wg.Wait()
	completed, exceeded := 0, 0
	for i := range n {
		switch {
		case statuses[i] == ledger.TransferCompleted:
			completed++
		case statuses[i] == ledger.TransferRejected && reasons[i] == ledger.ReasonRefundExceeds:
			exceeded++
		}
	}
	moved, err := l.Transfer(ctx, "", tr.TransferID)
	if completed != 14 || exceeded != 36 || err != nil || moved.AmountRefundedMinor != 998 {
		t.Fatalf("%d completed, %d exceeded, %d refunded (%v); want 14, 36, 998", completed, exceeded, moved.AmountRefundedMinor, err)
	}
	if balance(t, a) != 998 || balance(t, b) != 2 {
		t.Fatalf("balances %d/%d, want 998/2", balance(t, a), balance(t, b))
	}
}

// A posting that says it is a transfer, of a refund's claim (a worker that knows nothing of
// refunds), is refused: the row claimed with the request decides what moves.
func TestARefundsClaimIsNeverPostedAsATransfer(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	tr := posting(a, b, 600)
	if _, _, err := l.Post(ctx, tr, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	r := refund(tr, 1_000)
	if err := ledger.InsertPending(ctx, l.DB, r); err != nil {
		t.Fatal(err)
	}
	plain := r
	plain.Kind, plain.RefundOf = "", ""
	if _, _, err := l.Post(ctx, plain, api.TransferAnswer); !errors.Is(err, ledger.ErrInvalidPosting) {
		t.Fatalf("a refund's claim posted as a transfer: %v, want ErrInvalidPosting", err)
	}
	if balance(t, a) != 400 || balance(t, b) != 600 {
		t.Fatalf("balances %d/%d: money moved", balance(t, a), balance(t, b))
	}
	// Its own run, which knows it is a refund, then refuses it for what it is: more than the
	// transfer moved. (Left pending, the claim would be for the recovery pass to run.)
	if got, _, err := l.Post(ctx, r, api.TransferAnswer); err != nil || got.Status != ledger.TransferRejected {
		t.Fatalf("the refund itself: %+v %v", got, err)
	}
}

func balance(t *testing.T, id string) int64 {
	t.Helper()
	a, err := l.Account(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return a.BalanceMinor
}

func entries(t *testing.T, transferID string) int {
	t.Helper()
	var n int
	if err := l.DB.QueryRow(context.Background(), `SELECT count(*) FROM entries WHERE transfer_id = $1`, transferID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPostingTwicePostsOnce(t *testing.T) {
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	p := posting(a, b, 300)
	first, r1, err := l.Post(context.Background(), p, api.TransferAnswer)
	if err != nil || first.Status != ledger.TransferCompleted {
		t.Fatalf("first: %v %v", first.Status, err)
	}
	second, r2, err := l.Post(context.Background(), p, api.TransferAnswer)
	if err != nil || second.Status != ledger.TransferCompleted || string(r1.Body) != string(r2.Body) {
		t.Fatalf("second: %v %v", second.Status, err)
	}
	if balance(t, a) != 700 || balance(t, b) != 300 || entries(t, p.TransferID) != 2 {
		t.Fatalf("balances %d/%d entries %d", balance(t, a), balance(t, b), entries(t, p.TransferID))
	}
}

func TestConcurrentPostingsOfOneTransferPostOnce(t *testing.T) {
	a, b := account(t, "USD", 1_000), account(t, "USD", 0)
	p := posting(a, b, 100)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := l.Post(context.Background(), p, api.TransferAnswer)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if balance(t, a) != 900 || balance(t, b) != 100 || entries(t, p.TransferID) != 2 {
		t.Fatalf("balances %d/%d entries %d", balance(t, a), balance(t, b), entries(t, p.TransferID))
	}
}

func TestInsufficientFundsRejectsAndStoresTheAnswer(t *testing.T) {
	a, b := account(t, "USD", 50), account(t, "USD", 0)
	p := posting(a, b, 51)
	tr, resp, err := l.Post(context.Background(), p, api.TransferAnswer)
	if err != nil || tr.Status != ledger.TransferRejected || resp.Status != 422 {
		t.Fatalf("%v %d %v", tr.Status, resp.Status, err)
	}
	if balance(t, a) != 50 || entries(t, p.TransferID) != 0 {
		t.Fatal("a rejection moved money")
	}
	// Funds arriving later do not turn a final rejection into a posting.
	deposit(t, a, 1)
	tr, _, err = l.Post(context.Background(), p, api.TransferAnswer)
	if err != nil || tr.Status != ledger.TransferRejected {
		t.Fatalf("status %s after re-post: %v", tr.Status, err)
	}
	if balance(t, a) != 51 || entries(t, p.TransferID) != 0 {
		t.Fatalf("the re-post moved money: balance %d, entries %d", balance(t, a), entries(t, p.TransferID))
	}
}

func TestInvalidPostingsNeverHalfApply(t *testing.T) {
	usd, eur := account(t, "USD", 100), account(t, "EUR", 0)
	unknownCurrency := posting(usd, eur, 10)
	unknownCurrency.Currency = "XYZ"
	negative := posting(usd, eur, -10)
	for name, p := range map[string]ledger.Posting{
		"currency mismatch": posting(usd, eur, 10),
		"unknown currency":  unknownCurrency,
		"negative amount":   negative,
		"unknown account":   posting(usd, "acc_missing", 10),
		"same account":      posting(usd, usd, 10),
	} {
		if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); !errors.Is(err, ledger.ErrInvalidPosting) {
			t.Errorf("%s: err %v, want ErrInvalidPosting", name, err)
		}
		if entries(t, p.TransferID) != 0 {
			t.Errorf("%s: entries written", name)
		}
		if _, err := l.Transfer(context.Background(), "", p.TransferID); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s: the transfer row was left behind: %v", name, err)
		}
	}
	if balance(t, usd) != 100 || balance(t, eur) != 0 {
		t.Fatal("balances changed")
	}
}

func TestMarkFailedNeverUndoesAPosting(t *testing.T) {
	a, b := account(t, "USD", 100), account(t, "USD", 0)
	p := posting(a, b, 40)
	if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); err != nil {
		t.Fatal(err)
	}
	// The posting committed but its result was lost, and the run gave up: the ledger keeps the truth.
	tr, err := l.MarkFailed(context.Background(), p.TransferID, "run-1", "lost result")
	if err != nil || tr.Status != ledger.TransferCompleted || tr.FailureReason != nil {
		t.Fatalf("transfer %s (%v), want completed: %v", tr.Status, tr.FailureReason, err)
	}
	if balance(t, a) != 60 || entries(t, p.TransferID) != 2 {
		t.Fatal("the posting changed")
	}

	// A transfer that never posted is marked failed, and a later run still posts it once.
	q := posting(a, b, 10)
	if err := ledger.InsertPending(context.Background(), l.DB, q); err != nil {
		t.Fatal(err)
	}
	if tr, err := l.MarkFailed(context.Background(), q.TransferID, "run-1", "database down"); err != nil || tr.Status != ledger.TransferFailed {
		t.Fatalf("status %s (%v), want failed", tr.Status, err)
	}
	// The run that gave up cannot post it any more (its client was told no money moved); a
	// later run still posts it, once.
	q.RunID = "run-1"
	if _, _, err := l.Post(context.Background(), q, api.TransferAnswer); !errors.Is(err, ledger.ErrFenced) || entries(t, q.TransferID) != 0 {
		t.Fatalf("posting by the run that gave up: %v, %d entries", err, entries(t, q.TransferID))
	}
	q.RunID = "run-2"
	if tr, _, err := l.Post(context.Background(), q, api.TransferAnswer); err != nil || tr.Status != ledger.TransferCompleted || entries(t, q.TransferID) != 2 {
		t.Fatalf("re-run after failure: %s %v", tr.Status, err)
	}
	// Marking a transfer nobody inserted is harmless.
	if _, err := l.MarkFailed(context.Background(), "tr_unknown", "run-1", "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
}

func TestBalanceOverflowIsRefusedWhole(t *testing.T) {
	a, b := account(t, "USD", 100), account(t, "USD", 0)
	ctx := context.Background()
	// An absurd balance, only possible by hand; put back afterwards so the ledger reconciles.
	if _, err := l.DB.Exec(ctx, `UPDATE accounts SET balance_minor = $2 WHERE id = $1`, b, int64(math.MaxInt64-5)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = l.DB.Exec(ctx, `UPDATE accounts SET balance_minor = 0 WHERE id = $1`, b) })
	p := posting(a, b, 10)
	if _, _, err := l.Post(ctx, p, api.TransferAnswer); !errors.Is(err, ledger.ErrInvalidPosting) {
		t.Fatalf("err %v, want ErrInvalidPosting", err)
	}
	if balance(t, a) != 100 || balance(t, b) != math.MaxInt64-5 || entries(t, p.TransferID) != 0 {
		t.Fatal("an overflowing posting changed the ledger")
	}
}

// A transaction PostgreSQL aborts for a deadlock or a serialization failure runs again, and
// the retry is counted; any other error is returned at once.
func TestInTxRetriesDeadlocksAndCountsThem(t *testing.T) {
	before := testutil.ToFloat64(ledger.Retries)
	runs := 0
	err := l.InTx(context.Background(), func(pgx.Tx) error {
		runs++
		if runs < 3 {
			return &pgconn.PgError{Code: []string{"40P01", "40001"}[runs-1]}
		}
		return nil
	})
	if err != nil || runs != 3 || testutil.ToFloat64(ledger.Retries)-before != 2 {
		t.Fatalf("err %v after %d runs, %v retries counted", err, runs, testutil.ToFloat64(ledger.Retries)-before)
	}
	runs = 0
	boom := errors.New("boom")
	if err := l.InTx(context.Background(), func(pgx.Tx) error { runs++; return boom }); !errors.Is(err, boom) || runs != 1 {
		t.Fatalf("err %v after %d runs, want boom after 1", err, runs)
	}
}

// A posting queued behind another's lock on an account holds no share of that account while it
// waits: the account's row stays locked by the holder alone. Were the transfer's row (whose
// foreign keys take KEY SHARE on both accounts) written first, every posting queued on a hot
// account would join a multixact on its row, which each later reader resolves, and the account
// would slow down as the ledger grows.
func TestAPostingWaitingForAnAccountSharesNoLockOnIt(t *testing.T) {
	ctx := context.Background()
	a, b := account(t, "USD", 100), account(t, "USD", 0)
	holder, err := l.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	var holderXID string
	if err := holder.QueryRow(ctx, `SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text
		FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, a).Scan(&holderXID); err != nil {
		t.Fatal(err)
	}
	posted := make(chan error, 1)
	go func() {
		_, _, err := l.Post(ctx, posting(a, b, 1), api.TransferAnswer)
		posted <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		if err := l.DB.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the posting did not wait for the account's lock within 10 s")
		}
	}
	var xmax string
	if err := l.DB.QueryRow(ctx, `SELECT xmax::text FROM accounts WHERE id = $1`, a).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	if xmax != holderXID {
		t.Errorf("while the posting waits, the account's row is locked by %s (a multixact), not by its holder %s alone", xmax, holderXID)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if balance(t, a) != 99 || balance(t, b) != 1 {
		t.Fatalf("balances %d/%d, want 99/1", balance(t, a), balance(t, b))
	}
}
