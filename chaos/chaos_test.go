package chaos

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/payments/payments/rig/testenv"
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
	for _, kind := range []string{kindAuthorize, kindCapture, kindVoid, kindSchedule, kindCancel} {
		if r.Ops[kind] == 0 {
			t.Fatalf("the run made no %s: %v", kind, r.Ops)
		}
	}
	faults := 0
	for _, n := range r.Faults {
		faults += n
	}
	if faults < 5 || r.Lost == 0 {
		t.Fatalf("a run with %d faults and %d lost answers tested little", faults, r.Lost)
	}
	// The receiver took deliveries in every bad way it has, so the processor retried them.
	if h := r.Webhooks; h.Deliveries == 0 || h.Fates["500"] == 0 || h.Fates["slow"] == 0 || h.Fates["dropped"] == 0 {
		t.Fatalf("the webhook receiver was hardly exercised: %d deliveries, taken %v", h.Deliveries, h.Fates)
	}
}
