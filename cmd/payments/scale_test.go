package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/payments/payments/rig/testenv"
)

// Two `payments worker` and two `payments api` processes on one task queue: both workers take
// transfers, every transfer is sent to both APIs at once, each API's client retrying until it
// has a final answer, and each transfer moves its money once.
func TestTwoWorkersAndTwoAPIsShareTheLoad(t *testing.T) {
	scale := testenv.New(t, "payments_test_cli_scale", testenv.Options{NoWorker: true})
	bin := testenv.BuildPayments(t)
	for range 2 {
		scale.Process(t, bin, "", []string{"worker"})
	}
	var apis []string
	for range 2 {
		_, base := startAPI(t, scale, bin)
		apis = append(apis, base)
	}

	ownerID, key := scale.Owner(t)
	const accounts, count = 10, 200
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = scale.Account(t, key, "USD")
	}
	// Each account is funded with everything it sends, so no order of postings leaves one short:
	// every transfer completes, except every 20th, which asks for more than all the accounts
	// hold together and is rejected for insufficient funds.
	type transfer struct {
		from, to string
		amount   int64
		rejected bool
	}
	rng := rand.New(rand.NewPCG(5, 6))
	ts := make([]transfer, count)
	funding := map[string]int64{}
	var total int64
	for i := range ts {
		f, g := testenv.Pair(rng, accounts)
		ts[i] = transfer{ids[f], ids[g], 1 + rng.Int64N(200), i%20 == 19}
		if !ts[i].rejected {
			funding[ids[f]] += ts[i].amount
			total += ts[i].amount
		}
	}
	for _, id := range ids {
		if funding[id] > 0 {
			scale.Fund(t, id, funding[id])
		}
	}
	for i := range ts {
		if ts[i].rejected {
			ts[i].amount = total + 1
		}
	}

	// Every answer from each API, to every attempt: [transfer][API].
	answers := make([][2][]testenv.Response, count)
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, tr := range ts {
		body := testenv.TransferBody(tr.from, tr.to, tr.amount)
		for a, base := range apis { // the same request to both APIs at once
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				for {
					req, _ := http.NewRequest("POST", base+"/v1/transfers", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+key)
					req.Header.Set("Idempotency-Key", fmt.Sprintf("scale-%d", i))
					r := testenv.Send(t, req)
					answers[i][a] = append(answers[i][a], r)
					_, final, problem := testenv.ClassifyTransfer(r, tr.from, tr.to, tr.amount)
					if problem != "" {
						t.Errorf("transfer %d, API %d, answer %d: %s: %d (Content-Type %q, Retry-After %q, Location %q) %s", i, a, len(answers[i][a]),
							problem, r.Status, r.Header.Get("Content-Type"), r.Header.Get("Retry-After"), r.Header.Get("Location"), r.Body)
						return
					}
					if final {
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("transfer %d, API %d: no final answer after %d attempts", i, a, len(answers[i][a]))
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Both APIs' final answers are one answer, byte for byte, and the one the design guarantees;
	// the ledger holds exactly that transfer under the key's workflow ID, with its two entries if
	// it completed and none if it was rejected.
	wfIDs := make([]string, count)
	sent := make([]testenv.Sent, count)
	finals := make([]testenv.Response, count)
	tally := map[string]int{}
	for i, tr := range ts {
		wfIDs[i] = fmt.Sprintf("transfer/%s/scale-%d", ownerID, i)
		sent[i] = testenv.Sent{WorkflowID: wfIDs[i], From: tr.from, To: tr.to, Amount: tr.amount, Rejected: tr.rejected}
		for a := range apis {
			for _, r := range answers[i][a] {
				kind, _, _ := testenv.ClassifyTransfer(r, tr.from, tr.to, tr.amount)
				tally[fmt.Sprintf("API %d: %d %s", a, r.Status, kind)]++
			}
		}
		first, other := answers[i][0][len(answers[i][0])-1], answers[i][1][len(answers[i][1])-1]
		if testenv.Differ(first, other) {
			t.Errorf("transfer %d: the two APIs' final answers differ:\n%d %s\n%d %s", i, first.Status, first.Body, other.Status, other.Body)
		}
		finals[i] = first
	}
	want, completed := scale.HeldToAnswers(t, sent, finals)
	if completed < count*8/10 {
		t.Errorf("%d of %d transfers completed: the design guarantees at least 80%%", completed, count)
	}
	for _, id := range ids {
		if got := scale.Balance(t, id); got != funding[id]+want[id] {
			t.Errorf("account %s: balance %d, its funding and the completed transfers make %d", id, got, funding[id]+want[id])
		}
	}
	scale.Reconcile(t)

	// One Temporal run per workflow ID: every key's workflow has a run (its history below), and
	// there are as many closed, completed runs under the owner as keys, and nothing else.
	countRuns := func(query string) int {
		resp, err := scale.Temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId STARTS_WITH 'transfer/%s/' %s", ownerID, query)})
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.GetCount())
	}
	testenv.WaitFor(t, "every run to be visible and closed", func() bool {
		return countRuns("AND ExecutionStatus = 'Completed'") >= count && countRuns("AND ExecutionStatus = 'Running'") == 0
	})
	if all, done := countRuns(""), countRuns("AND ExecutionStatus = 'Completed'"); all != count || done != count {
		t.Errorf("%d runs, %d of them completed, for %d workflow IDs: want one completed run each", all, done, count)
	}

	// Both workers ran transfer workflows.
	identities := map[string]int{}
	for _, id := range wfIDs {
		it := scale.Temporal.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
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
	t.Logf("%d of %d transfers completed; answers %v; workflow tasks by worker: %v", completed, count, tally, identities)
}
