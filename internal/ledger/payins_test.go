package ledger_test

import (
	"context"
	"sync"
	"testing"

	"github.com/payments/payments/internal/ledger"
)

func accountNumber(t *testing.T, id string) string {
	t.Helper()
	var n string
	if err := l.DB.QueryRow(context.Background(), `SELECT account_number FROM accounts WHERE id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := l.DB.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// creditConcurrently makes n CreditPayin calls of c at once (a payin's run and its re-run, two
// workers) and fails t unless each returns the same payin.
func creditConcurrently(t *testing.T, c ledger.Credit, n int) ledger.Payin {
	t.Helper()
	start := make(chan struct{})
	payins := make([]ledger.Payin, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			payins[i], errs[i] = l.CreditPayin(context.Background(), c)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d of %d: %v", i, n, errs[i])
		}
		if payins[i].ID != payins[0].ID || payins[i].Status != payins[0].Status {
			t.Fatalf("call %d answered %+v, call 0 %+v", i, payins[i], payins[0])
		}
	}
	return payins[0]
}

// Concurrent calls for one bank event all succeed, with the one payin: credited once (one
// posting of two entries, one payin.received event), or recorded unmatched once.
func TestConcurrentCreditsOfOneEventCreditOnce(t *testing.T) {
	acc := account(t, "USD", 0)
	settlement := balance(t, ledger.SettlementAccountID("USD"))
	for round := range 5 { // a race lost once is not a race that cannot happen: several events
		id := ledger.NewID("bevt_test_")
		p := creditConcurrently(t, ledger.Credit{BankEventID: id, AccountNumber: accountNumber(t, acc), AmountMinor: 250,
			Currency: "USD", Reference: "invoice"}, 8)
		if p.Status != ledger.PayinCredited || p.AccountID == nil || *p.AccountID != acc {
			t.Fatalf("payin %+v", p)
		}
		want := int64(250 * (round + 1))
		if got := balance(t, acc); got != want {
			t.Fatalf("balance %d after %d credits of 250", got, round+1)
		}
		if got := settlement - balance(t, ledger.SettlementAccountID("USD")); got != want {
			t.Fatalf("the settlement account moved by %d, want -%d", -got, want)
		}
		if n := countEntries(t, p.ID, acc, 250); n != 1 || entries(t, p.ID) != 2 {
			t.Fatalf("the posting has %d entries, %d of 250 to the account", entries(t, p.ID), n)
		}
		if n := count(t, `SELECT count(*) FROM payins WHERE bank_event_id = $1`, id); n != 1 {
			t.Fatalf("%d payins", n)
		}
		if n := count(t, `SELECT count(*) FROM events WHERE object_id = $1 AND type = $2`, p.ID, ledger.EventPayinReceived); n != 1 {
			t.Fatalf("%d payin.received events", n)
		}

		nobody := ledger.NewID("bevt_test_")
		u := creditConcurrently(t, ledger.Credit{BankEventID: nobody, AccountNumber: "300000000009", AmountMinor: 70,
			Currency: "USD"}, 8)
		if u.Status != ledger.PayinUnmatched || u.AccountID != nil {
			t.Fatalf("payin for no account: %+v", u)
		}
		if n := count(t, `SELECT count(*) FROM payins WHERE bank_event_id = $1`, nobody); n != 1 || entries(t, u.ID) != 0 {
			t.Fatalf("%d payins, %d entries for an unmatched credit", n, entries(t, u.ID))
		}
	}
}

// A credit whose text holds a NUL (a payin run started before the bank's events were read
// storably, run again) is stored, the NUL escaped: a reference is credited, an account number
// with a NUL matches no account and is recorded unmatched.
func TestCreditTextPostgreSQLCannotStore(t *testing.T) {
	acc := account(t, "USD", 0)
	number := accountNumber(t, acc)
	p, err := l.CreditPayin(context.Background(), ledger.Credit{BankEventID: ledger.NewID("bevt_test_"), AccountNumber: number,
		AmountMinor: 40, Currency: "USD", Reference: "inv\x00oice"})
	if err != nil || p.Status != ledger.PayinCredited || p.Reference != `inv\u0000oice` || balance(t, acc) != 40 {
		t.Fatalf("%+v %v, balance %d", p, err, balance(t, acc))
	}
	u, err := l.CreditPayin(context.Background(), ledger.Credit{BankEventID: ledger.NewID("bevt_test_"), AccountNumber: number + "\x00",
		AmountMinor: 40, Currency: "USD"})
	if err != nil || u.Status != ledger.PayinUnmatched || u.AccountNumber != number+`\u0000` || balance(t, acc) != 40 {
		t.Fatalf("%+v %v, balance %d", u, err, balance(t, acc))
	}
}
