package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/ledger"
)

// Balance reads an account's balance from the ledger.
func (e *Env) Balance(t testing.TB, account string) int64 {
	t.Helper()
	acc, err := e.Ledger.Account(context.Background(), "", account)
	if err != nil {
		t.Fatal(err)
	}
	return acc.BalanceMinor
}

// Count runs a count query.
func (e *Env) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Hold locks account against postings until release is called (or t ends). A posting's FOR NO
// KEY UPDATE waits for this one, while claiming a transfer (whose foreign keys take KEY SHARE)
// goes through: a transfer from or to account is claimed, started, and then waits.
func (e *Env) Hold(t testing.TB, account string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.URL) // its own connection: the pool is the system's
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, account); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = conn.Close(ctx) }) } // closing ends the transaction
	t.Cleanup(release)
	return release
}

// Waiting counts the transactions of the test database waiting for a lock, such as postings
// behind Hold.
func (e *Env) Waiting(t testing.TB) int {
	return e.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
}

// CheckLedger reconciles the Env's ledger and returns the report as an error when an invariant
// is broken.
func (e *Env) CheckLedger() error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.URL) // directly, not through a Proxy a test may have cut
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var statement []bank.Payment
	if e.Bank != nil { // invariant 8: the payouts agree with the bank's own statement
		if statement, err = (&bank.HTTP{BaseURL: e.Bank.URL}).Statement(ctx); err != nil {
			return fmt.Errorf("the bank's statement: %w", err)
		}
	}
	report, err := ledger.Reconcile(ctx, conn, *e.minTTL, statement)
	if err != nil {
		return err
	}
	if !report.OK() {
		var b bytes.Buffer
		report.Print(&b)
		return errors.New(b.String())
	}
	return nil
}

// Reconcile fails t unless every ledger invariant holds.
func (e *Env) Reconcile(t testing.TB) {
	t.Helper()
	if err := e.CheckLedger(); err != nil {
		t.Fatalf("reconcile:\n%v", err)
	}
}

// Main is a package's TestMain: it starts the package's Env on a fresh database for name (Start)
// into *env, runs the tests on it (Run) and exits with their result.
func Main(m *testing.M, env **Env, name string, o Options) {
	e, err := Start(context.Background(), name, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test environment:", err)
		os.Exit(1)
	}
	*env = e
	os.Exit(Run(m, e))
}

// Run runs the package's tests on e, each response they receive checked against openapi.yaml
// (Contract), then fails the run if they left a ledger that does not reconcile or a response
// that broke the contract, and closes e. TestMain returns its result to os.Exit.
func Run(m *testing.M, e *Env) int {
	contract, err := NewContract()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	http.DefaultClient.Transport, current = contract, contract
	code := m.Run()
	if err := e.CheckLedger(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "the tests left a ledger that does not reconcile:\n"+err.Error())
		code = 1
	}
	if err := contract.Report(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	fmt.Printf("contract: %d responses checked against openapi.yaml\n", contract.Checked())
	e.Close()
	return code
}

// current is the Contract Run installed.
var current *Contract

// ContractOf is the Contract the package's responses are checked against (Run installs it).
func ContractOf(t testing.TB) *Contract {
	if current == nil {
		t.Fatal("no contract checker: TestMain must call testenv.Run")
	}
	return current
}

// Sent is a transfer a test sends, and the outcome its design guarantees whatever the order the
// postings run in: completed, or (Rejected) rejected for insufficient funds.
type Sent struct {
	WorkflowID string
	From, To   string
	Amount     int64
	Rejected   bool
}

// HeldToAnswers checks each transfer's final answer against its design and the ledger: the
// answer is the one the design guarantees (201, or 422 insufficient-funds), and the ledger holds
// exactly one transfer under its workflow ID, the one the answer names, from, to and of the
// amount sent, with its two entries if it completed and none if it was rejected. It returns
// what each account's balance moved by, from the completed ones, and how many completed.
func (e *Env) HeldToAnswers(t testing.TB, sent []Sent, finals []Response) (moved map[string]int64, completed int) {
	t.Helper()
	type row struct {
		ID, Status, From, To string
		Amount, Entries      int64
		FromMoved, ToMoved   int64
	}
	ids := make([]string, len(sent))
	for i, s := range sent {
		ids[i] = s.WorkflowID
	}
	rows, err := e.DB.Query(context.Background(), `
		SELECT t.workflow_id, t.id, t.status, t.from_account_id, t.to_account_id, t.amount_minor, count(e.id),
			coalesce(sum(e.amount_minor) FILTER (WHERE e.account_id = t.from_account_id), 0),
			coalesce(sum(e.amount_minor) FILTER (WHERE e.account_id = t.to_account_id), 0)
		FROM transfers t LEFT JOIN entries e ON e.transfer_id = t.id
		WHERE t.workflow_id = ANY($1) GROUP BY t.id`, ids)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string][]row{}
	var wf string
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&wf, &r.ID, &r.Status, &r.From, &r.To, &r.Amount, &r.Entries, &r.FromMoved, &r.ToMoved}, func() error {
		held[wf] = append(held[wf], r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	moved = map[string]int64{}
	for i, s := range sent {
		final := finals[i]
		if len(held[s.WorkflowID]) != 1 {
			t.Errorf("%s: %d transfers under the workflow ID, want 1: %+v", s.WorkflowID, len(held[s.WorkflowID]), held[s.WorkflowID])
			continue
		}
		r := held[s.WorkflowID][0]
		var body map[string]any
		_ = json.Unmarshal(final.Body, &body)
		wantStatus, state, entries, amount, named := http.StatusCreated, "completed", int64(2), s.Amount, body["id"]
		if s.Rejected {
			wantStatus, state, entries, amount, named = http.StatusUnprocessableEntity, "rejected", 0, 0, body["transfer_id"]
		}
		if final.Status != wantStatus {
			t.Errorf("%s: answered %d, but its design guarantees %d: %s", s.WorkflowID, final.Status, wantStatus, final.Body)
		}
		if named != r.ID || r.Status != state || r.Entries != entries || r.FromMoved != -amount || r.ToMoved != amount ||
			r.From != s.From || r.To != s.To || r.Amount != s.Amount {
			t.Errorf("%s: the ledger holds %+v, want transfer %v %s with %d entries moving %d: answered %d %s",
				s.WorkflowID, r, named, state, entries, amount, final.Status, final.Body)
		}
		if r.Status == "completed" {
			completed++
			moved[s.From] -= s.Amount
			moved[s.To] += s.Amount
		}
	}
	return moved, completed
}
