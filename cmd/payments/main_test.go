package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/rig/testenv"
	"github.com/payments/payments/worker"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, "payments_test_cli", testenv.Options{})
}

// commandsOn points the commands dispatch runs at databaseURL and the Env's Temporal, and every
// other address they may use at the test's own, with the Env's codec keys: a bank that does not answer (503), the API and
// metrics on free ports. Nothing they do reaches what else runs on this machine (make run's bank
// on the default PAYMENTS_BANK_URL, its API on :8080). It returns the bank's URL.
func commandsOn(t *testing.T, databaseURL string) (bankURL string) {
	t.Helper()
	noBank := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no bank in this test", http.StatusServiceUnavailable)
	}))
	t.Cleanup(noBank.Close)
	t.Setenv("DATABASE_URL", databaseURL)
	t.Setenv("TEMPORAL_ADDRESS", env.TemporalAddr())
	t.Setenv("PAYMENTS_CODEC_KEYS", testenv.CodecKeys) // the keys the Env's workers seal with
	t.Setenv("PAYMENTS_BANK_URL", noBank.URL)
	t.Setenv("PAYMENTS_HTTP_ADDR", testenv.FreeAddr())
	t.Setenv("PAYMENTS_METRICS_ADDR", testenv.FreeAddr())
	return noBank.URL
}

// Every command's --help (and -h) prints its usage and flags, each flag its usage line names,
// and exits 0 having done nothing; so does the help of a command's subcommand (keys create).
func TestEveryCommandPrintsItsHelp(t *testing.T) {
	for _, c := range commands {
		lines := [][]string{{c.name, "--help"}, {c.name, "-h"}}
		if c.sub != "" {
			lines = append(lines, []string{c.name, c.sub, "--help"})
		}
		for _, args := range lines {
			var out bytes.Buffer
			if err := dispatch(context.Background(), args, &out); err != nil {
				t.Errorf("%v: %v, want exit 0", args, err)
				continue
			}
			if !strings.HasPrefix(out.String(), "usage: payments "+c.name) {
				t.Errorf("%v: no usage line:\n%s", args, out.String())
			}
			for _, flag := range regexp.MustCompile(`--[a-z-]+`).FindAllString(c.help, -1) {
				if !strings.Contains(out.String(), "  "+flag[1:]+" ") && !strings.Contains(out.String(), "  "+flag[1:]+"\n") {
					t.Errorf("%v: the flag %s is not listed:\n%s", args, flag, out.String())
				}
			}
		}
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"nope"},
		{"keys"},
		{"keys", "create"},
		{"accounts", "create", "--owner", "a"},
		{"accounts", "create", "--owner", "a", "--currency", "usd"},
		{"deposit", "--account", "acc_x", "--amount-minor", "0"},
		{"deposit", "--account", "acc_x", "--amount-minor", "5", "--idempotency-key", "has space"},
		{"migrate", "extra"},
		{"api", "--port", "1"},
		{"reconcile", "now"},
		{"replay"},
		{"replay", "everything"},
		{"replay", "failed"},
		{"rerun"},
		{"rerun", "everything"},
		{"rerun", "failed", "--since", "yesterday"},
		{"rerun", "failed", "--since", "-1h"},
		{"keys", "create", "--owner", "system"},
		{"keys", "create", "--owner", "a", "--scope", "admin"},
		{"keys", "list"},
		{"keys", "revoke"},
		{"keys", "revoke", "key_a", "key_b"},
		{"keys", "rotate"},
		{"accounts", "create", "--owner", "system", "--currency", "USD"},
		{"replay", "history"},
		{"replay", "history", "--strict", "h.json"},
		{"bench", "--clients", "0"},
		{"bench", "--watch-pid", "api"},
	} {
		var usage usageError
		if err := dispatch(context.Background(), args, io.Discard); !errors.As(err, &usage) {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
	}
}

func TestDepositRunsThroughTheTransferWorkflowOnce(t *testing.T) {
	ownerID, key := env.Owner(t)
	acc := env.Account(t, key, "EUR")
	funding := env.Balance(t, money.FundingAccountID("EUR"))
	for range 2 { // the second call is a retry with the same key
		answer, err := env.Transfers.Deposit(context.Background(), acc, 5_000, "seed-1")
		if err != nil || answer.Status != 201 {
			t.Fatalf("deposit: %+v %v", answer, err)
		}
	}
	if got := env.Balance(t, acc); got != 5_000 {
		t.Fatalf("balance %d, want 5000", got)
	}
	if got := env.Balance(t, money.FundingAccountID("EUR")); got != funding-5_000 {
		t.Fatalf("funding account moved by %d, want -5000", got-funding)
	}
	if n := env.Count(t, `SELECT count(*) FROM entries WHERE account_id = $1`, acc); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
	if st := env.Settled(t, "deposit/"+ownerID+"/seed-1"); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("deposit workflow: %v", st)
	}
	commandsOn(t, env.URL)
	var usage usageError
	err := dispatch(context.Background(), []string{"deposit", "--account", money.FundingAccountID("EUR"), "--amount-minor", "1"}, io.Discard)
	if !errors.As(err, &usage) {
		t.Fatalf("depositing into a funding account: %v, want a usage error", err)
	}
}

// reconcile reports a clean ledger with status 0 and a broken one with status 1 (errExitOne),
// naming the broken invariant.
func TestReconcileCommand(t *testing.T) {
	ctx := context.Background()
	url, err := testenv.FreshDatabase(ctx, "payments_test_cli_reconcile")
	if err != nil {
		t.Fatal(err)
	}
	bankURL := commandsOn(t, url)
	var out bytes.Buffer
	// The test's bank does not answer: invariant 8 is reported as not checked, never as holding,
	// whatever else runs on this machine (make run's bank on the default PAYMENTS_BANK_URL).
	if err := dispatch(ctx, []string{"reconcile"}, &out); err != nil || !strings.Contains(out.String(), "All 15 invariants checked hold; 1 could not be checked") ||
		!strings.Contains(out.String(), "the bank at "+bankURL+" did not give its statement") {
		t.Fatalf("clean ledger: %v\n%s", err, out.String())
	}
	db, err := database.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `UPDATE accounts SET balance_minor = 7 WHERE id = $1`, money.FundingAccountID("GBP")); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = dispatch(ctx, []string{"reconcile"}, &out)
	if !errors.Is(err, errExitOne) || !strings.Contains(out.String(), "BROKEN  3.") || !strings.Contains(out.String(), "GBP: balances sum to 7") {
		t.Fatalf("broken ledger: %v\n%s", err, out.String())
	}
}

// A worker refuses to start against a namespace without the transfer search attributes, and
// says what to run.
func TestWorkerChecksSearchAttributes(t *testing.T) {
	ctx := context.Background()
	_, err := env.Temporal.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: "bare", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the new namespace to be usable", func() bool {
		_, err := env.Temporal.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "bare"})
		return err == nil
	})
	commandsOn(t, env.URL)
	t.Setenv("TEMPORAL_NAMESPACE", "bare")
	err = dispatch(ctx, []string{"worker"}, io.Discard)
	want := "temporal operator search-attribute create --namespace bare --name AmountMinor --type Int --name AuthorizationStatus --type Keyword --name Currency --type Keyword"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want the command to run (%s …)", err, want)
	}
	if err := worker.CheckSearchAttributes(ctx, env.Temporal, "default"); err != nil {
		t.Fatalf("the test namespace has them: %v", err)
	}
}
