package chaos

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/testenv"
)

// The short seeded run `make test` makes: a few hundred operations under every kind of fault,
// then the checker. PAYMENTS_CHAOS_SEED picks another seed; a failure prints the seed, the
// operation and the faults around it.
func TestShortChaosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos run starts a PostgreSQL, a Temporal cluster and six processes")
	}
	seed := uint64(1)
	if s := os.Getenv("PAYMENTS_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PAYMENTS_CHAOS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	var out bytes.Buffer
	r, err := Run(context.Background(), Options{Seed: seed, Ops: 300, Bin: testenv.BuildPayments(t),
		Root: testenv.RepoRoot(), Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	r.Print(&out)
	t.Log("\n" + out.String())
	if len(r.Violations) > 0 {
		t.Fatalf("%d violations (seed %d)", len(r.Violations), seed)
	}
	faults := 0
	for _, n := range r.Faults {
		faults += n
	}
	if faults < 5 || r.Lost == 0 {
		t.Fatalf("a run with %d faults and %d lost answers tested little", faults, r.Lost)
	}
}

// The checker must be able to fail: answers that contradict the ledger, two answers for one
// key, a reused key that ran, a client left without an answer, each is a violation.
func TestCheckerFindsWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	url, err := testenv.FreshDatabase(ctx, "payments_test_chaos_checker")
	if err != nil {
		t.Fatal(err)
	}
	db, err := database.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	created := answer{Status: 201, Body: `{"id":"tr_missing","status":"completed"}`}
	ops := []*op{
		{N: 0, Kind: kindTransfer, Amount: 5, Answers: []answer{created}},
		{N: 1, Kind: kindTransfer, Variant: concurrent, Amount: 5, Answers: []answer{created, {Status: 201, Body: `{"id":"tr_other"}`}, created}},
		{N: 2, Kind: kindTransfer, Variant: reused, Ref: 0, Answers: []answer{created}},
		{N: 3, Kind: kindPayout, Amount: 5, Attempts: 40},
		{N: 4, Kind: kindRefund, Target: "tr_missing", Amount: 3,
			Answers: []answer{{Status: 422, Body: `{"type":"/problems/refund-exceeds-transfer"}`}}},
		{N: 6, Kind: kindRefund, Variant: concurrent, Target: "tr_missing", Amount: 3, Answers: []answer{
			{Status: 422, Body: `{"type":"/problems/refund-exceeds-transfer","refund_id":"rf_1"}`},
			{Status: 201, Body: `{"id":"rf_2"}`}, {Status: 422, Body: `{"type":"/problems/transfer-not-refundable"}`}}},
		{N: 7, Kind: kindPayout, Amount: 5, Answers: []answer{{Status: 201, Body: `{"id":"po_missing"}`}}},
		{N: 5, Kind: kindTransfer, Variant: again, Ref: 0, Answers: []answer{{Status: 422, Body: `{"type":"/problems/insufficient-funds"}`}}},
	}
	byN := map[int]*op{}
	for _, o := range ops {
		o.Start, o.End = now, now
		byN[o.N] = o
	}
	c := &checker{db: db}
	for _, o := range ops {
		before := len(c.found)
		c.op(ctx, o, byN)
		if len(c.found) == before {
			t.Errorf("operation %d (%s %s) passed the checker", o.N, o.Kind, o.Variant)
		}
	}
	log := []fault{{Kind: faultKillAPI, Target: "api-1", Start: now, End: now}}
	if d := describe(7, c.found[0], log, "faults.log"); !strings.Contains(d, "seed 7") || !strings.Contains(d, "operation 0") ||
		!strings.Contains(d, "kill-api api-1") {
		t.Fatalf("a violation must name the seed, the operation and the faults around it:\n%s", d)
	}
}
