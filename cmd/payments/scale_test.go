package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/api/enums/v1"

	"github.com/payments/payments/internal/testenv"
)

// Two `payments worker` and two `payments api` processes on one task queue: both workers take
// transfers, every transfer is sent to both APIs at once, and each moves its money once.
func TestTwoWorkersAndTwoAPIsShareTheLoad(t *testing.T) {
	scale := testenv.New(t, "payments_test_cli_scale", testenv.Options{NoWorker: true})
	bin := testenv.BuildPayments(t)
	for range 2 {
		scale.Process(t, bin, "", []string{"worker"}, "PAYMENTS_METRICS_ADDR="+testenv.FreeAddr())
	}
	var apis []string
	for range 2 {
		_, base := startAPI(t, scale, bin)
		apis = append(apis, base)
	}

	ownerID, key := scale.Owner(t)
	const accounts, funded, count = 10, 1_000, 200
	ids := scale.FundedAccounts(t, key, accounts, funded)
	rng := rand.New(rand.NewPCG(5, 6))
	type answer struct {
		status int
		body   string
	}
	answers := make([][2]answer, count)
	bodies := make([]string, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range count {
		f, g := testenv.Pair(rng, accounts)
		bodies[i] = testenv.TransferBody(ids[f], ids[g], 1+rng.Int64N(200))
		for a, base := range apis { // the same request to both APIs at once
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				req, _ := http.NewRequest("POST", base+"/v1/transfers", strings.NewReader(bodies[i]))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("scale-%d", i))
				r := testenv.Send(t, req)
				answers[i][a] = answer{r.Status, string(r.Body)}
			})
		}
	}
	wg.Wait()

	for i, pair := range answers {
		if pair[0] != pair[1] {
			t.Fatalf("transfer %d: the two APIs answered differently:\n%d %s\n%d %s", i, pair[0].status, pair[0].body, pair[1].status, pair[1].body)
		}
		if pair[0].status != http.StatusCreated && pair[0].status != http.StatusUnprocessableEntity {
			t.Fatalf("transfer %d: %d %s", i, pair[0].status, pair[0].body)
		}
	}
	entries := scale.Count(t, `SELECT count(*) FROM entries WHERE account_id = ANY($1)`, ids)
	completed := scale.Count(t, `SELECT count(*) FROM transfers WHERE from_account_id = ANY($1) AND status = 'completed'`, ids)
	if entries != accounts+2*completed {
		t.Fatalf("%d entries for %d completed transfers", entries, completed)
	}
	scale.Reconcile(t)

	// Both workers ran transfer workflows.
	identities := map[string]int{}
	for i := range count {
		it := scale.Temporal.GetWorkflowHistory(context.Background(), fmt.Sprintf("transfer/%s/scale-%d", ownerID, i), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if a := ev.GetWorkflowTaskStartedEventAttributes(); a != nil {
				identities[a.GetIdentity()]++
			}
		}
	}
	if len(identities) != 2 {
		t.Fatalf("workflow tasks by worker: %v, want both workers", identities)
	}
	t.Logf("workflow tasks by worker: %v", identities)
}
