package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/api"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/rig/testenv"
)

// ownerOf is the id of account id's owner.
func ownerOf(t testing.TB, id string) string {
	t.Helper()
	acc, err := l.Account(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return acc.OwnerID
}

// feed is all of owner's events, oldest first, as the objects' ids they are about.
func feed(t *testing.T, owner string) []string {
	t.Helper()
	var ids []string
	after := ""
	for {
		page, err := l.Events(context.Background(), owner, after, "", 200)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) == 0 {
			return ids
		}
		ids = append(ids, objectIDs(t, page)...)
		after = *page.NextCursor
	}
}

func objectIDs(t *testing.T, page ledger.EventPage) []string {
	t.Helper()
	ids := make([]string, len(page.Data))
	for i, raw := range page.Data {
		var ev struct {
			Data struct{ Object struct{ ID string } }
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		ids[i] = ev.Data.Object.ID
	}
	return ids
}

// A change that has written its events and not yet committed holds back the changes its owner
// sees, so that the owner's feed stays in commit order, and no other owner's: a transfer
// between the accounts of another owner posts, with its event, while it is open.
func TestAnOpenChangeHoldsBackOnlyItsOwnersChanges(t *testing.T) {
	ctx := context.Background()
	x1, x2 := accountOf(t, t.Name()+"/x", "USD", 100), accountOf(t, t.Name()+"/x", "USD", 0)
	y1, y2 := accountOf(t, t.Name()+"/y", "USD", 100), accountOf(t, t.Name()+"/y", "USD", 0)
	held, err := l.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx)
	if err := ledger.WriteEvent(ctx, held, ledger.EventTransferCompleted, ledger.NewID("tr_"), x1); err != nil {
		t.Fatal(err)
	}

	sameOwner := make(chan error, 1)
	go func() {
		_, _, err := l.Post(ctx, posting(x1, x2, 1), api.TransferAnswer)
		sameOwner <- err
	}()

	other := posting(y1, y2, 1)
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, _, err := l.Post(octx, other, api.TransferAnswer); err != nil {
		t.Fatalf("another owner's transfer, while a change of the first owner's is open: %v", err)
	}
	if got := feed(t, ownerOf(t, y1)); !slices.Contains(got, other.TransferID) {
		t.Fatalf("the other owner's feed is %v, without its transfer %s", got, other.TransferID)
	}
	select {
	case err := <-sameOwner:
		t.Fatalf("the first owner's transfer committed while a change it sees was open (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := held.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sameOwner; err != nil {
		t.Fatal(err)
	}
	if balance(t, x2) != 1 || balance(t, y2) != 1 {
		t.Fatalf("balances %d and %d, want 1 and 1", balance(t, x2), balance(t, y2))
	}
}

// writers posts, from each of 8 goroutines, n transfers from one of accs' funded accounts (the
// even ones) at random to another, and adds to seen the transfers each owner should see.
func writers(t *testing.T, accs []string, n int, seen map[string][]string) {
	t.Helper()
	owner := map[string]string{}
	for _, acc := range accs {
		owner[acc] = ownerOf(t, acc)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range n {
				from := accs[2*rng.IntN(len(accs)/2)]
				to := accs[rng.IntN(len(accs))]
				if to == from {
					continue
				}
				p := posting(from, to, 1)
				if _, _, err := l.Post(context.Background(), p, api.TransferAnswer); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[owner[from]] = append(seen[owner[from]], p.TransferID)
				if owner[to] != owner[from] {
					seen[owner[to]] = append(seen[owner[to]], p.TransferID)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// ownersAccounts makes owners owners with two accounts each, the first funded: accs[2i] and
// accs[2i+1] are owner i's.
func ownersAccounts(t *testing.T, owners int) []string {
	var accs []string
	for i := range owners {
		name := fmt.Sprintf("%s/%d", t.Name(), i)
		accs = append(accs, accountOf(t, name, "USD", 1_000_000), accountOf(t, name, "USD", 0))
	}
	return accs
}

// Eight writers post transfers within and across six owners while a reader per owner follows
// its feed page by page: each reader ends with exactly the owner's feed as read afterwards, in
// the same order (no event showed up behind a cursor already passed, none twice, none
// missing), and that feed is the transfers the writers made that the owner is a side of.
func TestFeedsStayInCommitOrderUnderConcurrentWriters(t *testing.T) {
	accs := ownersAccounts(t, 6)
	owners := make([]string, 0, 6)
	want := map[string][]string{} // the deposits, then what the writers post
	for i := 0; i < len(accs); i += 2 {
		owner := ownerOf(t, accs[i])
		owners, want[owner] = append(owners, owner), feed(t, owner)
	}
	done := make(chan struct{})
	read := make([][]string, len(owners))
	var readers sync.WaitGroup
	for i, owner := range owners {
		readers.Add(1)
		go func() {
			defer readers.Done()
			read[i] = follow(t, owner, done)
		}()
	}
	writers(t, accs, 60, want)
	close(done)
	readers.Wait()
	for i, owner := range owners {
		all := feed(t, owner)
		if !slices.Equal(read[i], all) {
			t.Errorf("owner %d: followed as it was written, the feed read %d events; read afterwards, %d: they differ at %d",
				i, len(read[i]), len(all), firstDifference(read[i], all))
		}
		if !sameSet(all, want[owner]) {
			t.Errorf("owner %d: the feed holds %d transfers, the writers made %d the owner is a side of", i, len(all), len(want[owner]))
		}
	}
}

// follow reads owner's feed from the start, a page after the other, until done is closed and a
// page comes back empty, and returns what it read in order.
func follow(t *testing.T, owner string, done <-chan struct{}) []string {
	var ids []string
	after := ""
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		page, err := l.Events(context.Background(), owner, after, "", 7)
		if err != nil {
			t.Error(err)
			return ids
		}
		if len(page.Data) == 0 {
			if finished {
				return ids
			}
			continue
		}
		ids = append(ids, objectIDs(t, page)...)
		after = *page.NextCursor
	}
	t.Error("the feed was still growing after a minute")
	return ids
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// While transfers of one owner's post from four writers, its endpoints are created and deleted
// one after the other: each endpoint's deliveries are a run of the owner's feed without a hole,
// holding every transfer that committed between its creation and its deletion and none that
// committed before it was created or began after it was deleted; and, deleted, none pending.
func TestEndpointsGetTheEventsThatCommitWhileTheyExist(t *testing.T) {
	ctx := context.Background()
	accs := ownersAccounts(t, 2) // owner 1's accounts, sides of some transfers, keep their endpoints apart
	owner := ownerOf(t, accs[0])
	type span struct{ began, returned time.Time }
	var mu sync.Mutex
	posted := map[string]span{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := posting(accs[0], accs[1+(w+i)%3], 1)
				began := time.Now()
				if _, _, err := l.Post(ctx, p, api.TransferAnswer); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				posted[p.TransferID] = span{began, time.Now()}
				mu.Unlock()
			}
		}()
	}
	type life struct {
		id                                             string
		createBegan, created, deleteBegan, deleteEnded time.Time
	}
	var lives []life
	for range 5 {
		time.Sleep(30 * time.Millisecond)
		e := life{id: ledger.NewID("we_"), createBegan: time.Now()}
		if err := l.InTx(ctx, func(tx pgx.Tx) error {
			_, err := ledger.CreateEndpoint(ctx, tx, testenv.Keys, owner, ledger.Endpoint{ID: e.id, URL: "https://example.com/hook",
				EventTypes: []string{"*"}, Secret: "whsec_test"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		e.created = time.Now()
		time.Sleep(60 * time.Millisecond)
		e.deleteBegan = time.Now()
		if err := l.DeleteEndpoint(ctx, owner, e.id); err != nil {
			t.Fatal(err)
		}
		e.deleteEnded = time.Now()
		lives = append(lives, e)
	}
	close(stop)
	wg.Wait()

	all := feed(t, owner)
	for n, e := range lives {
		got := deliveredTo(t, e.id)
		var in []int
		for i, id := range all {
			s := posted[id]
			switch {
			case got[id]:
				in = append(in, i)
				if s.returned.Before(e.createBegan) || s.began.After(e.deleteEnded) {
					t.Errorf("endpoint %d got %s, which committed before it was created or began after it was deleted", n, id)
				}
			case s.began.After(e.created) && s.returned.Before(e.deleteBegan):
				t.Errorf("endpoint %d did not get %s, which committed while it existed", n, id)
			}
		}
		if len(in) == 0 || in[len(in)-1]-in[0]+1 != len(in) || len(in) != len(got) {
			t.Errorf("endpoint %d got %d events, at places %v of the owner's feed of %d: want one run without a hole", n, len(got), in, len(all))
		}
		if pending := count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending'`, e.id); pending > 0 {
			t.Errorf("endpoint %d, deleted, still has %d deliveries pending", n, pending)
		}
	}
}

// An attempt recorded twice (its first update committed and its answer was lost, or two attempts
// of a batch ran at once) is not taken for a canceled delivery, which would end the endpoint's
// delivery run as though the endpoint were deleted; a delivery canceled with its endpoint is.
func TestAnAttemptRecordedTwiceIsNotACancel(t *testing.T) {
	ctx := context.Background()
	accs := ownersAccounts(t, 1)
	owner := ownerOf(t, accs[0])
	id := ledger.NewID("we_")
	if err := l.InTx(ctx, func(tx pgx.Tx) error {
		_, err := ledger.CreateEndpoint(ctx, tx, testenv.Keys, owner, ledger.Endpoint{ID: id, URL: "https://example.com/hook",
			EventTypes: []string{"*"}, Secret: "whsec_test"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := l.Post(ctx, posting(accs[0], accs[1], 1), api.TransferAnswer); err != nil {
			t.Fatal(err)
		}
	}
	due, err := l.PendingDeliveries(ctx, id, 10)
	if err != nil || len(due) != 2 {
		t.Fatalf("%d deliveries pending (%v), want 2", len(due), err)
	}
	for try := range 2 {
		if canceled, err := l.RecordAttempt(ctx, id, due[0].Seq, true, 200, ""); err != nil || canceled {
			t.Fatalf("recording a delivery, time %d: canceled %v, %v; want not canceled", try+1, canceled, err)
		}
	}
	if err := l.DeleteEndpoint(ctx, owner, id); err != nil {
		t.Fatal(err)
	}
	if canceled, err := l.RecordAttempt(ctx, id, due[1].Seq, true, 200, ""); err != nil || !canceled {
		t.Fatalf("recording a delivery of a deleted endpoint: canceled %v, %v; want canceled", canceled, err)
	}
	if n := count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, id); n != 1 {
		t.Errorf("%d deliveries delivered, want 1", n)
	}
}

// deliveredTo is the objects of the events queued for endpoint, whatever became of them.
func deliveredTo(t *testing.T, endpoint string) map[string]bool {
	t.Helper()
	rows, err := l.DB.Query(context.Background(), `SELECT e.object_id FROM webhook_deliveries d
		JOIN events e ON e.seq = d.event_seq WHERE d.endpoint_id = $1`, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, id := range ids {
		got[id] = true
	}
	return got
}

// Eight writers, each posting between the two accounts of an owner of its own, never wait on a
// lock for one another: sampled every millisecond or so, no backend of the test's database
// waits on a heavyweight lock (relation extension aside: that is the table growing, not an
// order between owners).
func TestDisjointOwnersNeverWaitOnEachOther(t *testing.T) {
	ctx := context.Background()
	accs := ownersAccounts(t, 8)
	stop := make(chan struct{})
	var samples, waiting, extending int
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var w, e int
			if err := l.DB.QueryRow(ctx, `SELECT count(*) FILTER (WHERE wait_event <> 'extend'), count(*) FILTER (WHERE wait_event = 'extend')
				FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&w, &e); err != nil {
				t.Error(err)
				return
			}
			samples++
			waiting += min(w, 1)
			extending += min(e, 1)
		}
	}()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				if _, _, err := l.Post(ctx, posting(accs[2*w], accs[2*w+1], 1), api.TransferAnswer); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	t.Logf("%d samples: %d with a backend waiting on a lock, %d on extending a relation", samples, waiting, extending)
	if waiting > 0 {
		t.Errorf("in %d of %d samples a posting waited on a lock, though no two writers share an owner or an account", waiting, samples)
	}
	for w := range 8 {
		if got := balance(t, accs[2*w+1]); got != 150 {
			t.Errorf("owner %d's second account holds %d, want 150", w, got)
		}
	}
}
