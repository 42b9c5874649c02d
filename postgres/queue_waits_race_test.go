package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// Several nodes on one database: waits and offers of one (key, value)
// begun on two nodes at once never miss each other and never share an
// offer; Wake on two nodes wakes each entry once; a node's sleepers wake
// on another.

// together runs fns at once (released by one close) and waits for them.
func together(fns ...func()) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); <-start; fn() }()
	}
	close(start)
	wg.Wait()
}

// consumedBy reads who consumed offerID's offer of waitKey ("" for none).
func consumedBy(t *testing.T, st *Store, offerID string) string {
	t.Helper()
	var by *string
	if err := st.db.pool.QueryRow(context.Background(), `SELECT consumed_by FROM touba.offers WHERE queue_id = $1 AND key = $2`,
		offerID, waitKey).Scan(&by); err != nil {
		t.Fatalf("offer of %s: %v", offerID, err)
	}
	if by == nil {
		return ""
	}
	return *by
}

// TestWaitAndOfferRaceAcrossNodes: a wait begun on one node and the
// matching delivery accepted on the other at the same moment, many times:
// whichever commits first, the wait ends matched by that delivery, and
// its entry is never left waiting.
func TestWaitAndOfferRaceAcrossNodes(t *testing.T) {
	raceWaitAndOffer(t, openNodes(t, 2, time.Hour), 40)
}

func raceWaitAndOffer(t *testing.T, nodes []*Store, rounds int) {
	t.Helper()
	ctx := context.Background()
	for i := range rounds {
		waiter, offerer := nodes[i%2], nodes[(i+1)%2]
		value := fmt.Sprintf(`"order-%d"`, i)
		w := leaseOne(t, waiter.Queue, &touba.Delivery{TriggerRef: waiterRef, EventID: fmt.Sprint("w-", i), Body: []byte(`{}`)})
		var began touba.Wait
		var res touba.EnqueueResult
		var werr, oerr error
		together(
			func() {
				began, werr = waiter.Queue.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "paid",
					Kind: touba.WaitEvent, Key: waitKey, Value: value})
			},
			func() { res, oerr = offerer.Queue.Enqueue(ctx, offer(fmt.Sprint("p-", i), value)) },
		)
		if werr != nil || oerr != nil {
			t.Fatalf("round %d: begin wait %v, enqueue %v", i, werr, oerr)
		}
		e := mustGet(t, offerer.Queue, w.QueueID)
		ws, err := offerer.Queue.Waits(ctx, w.QueueID)
		if err != nil || len(ws) != 1 {
			t.Fatalf("round %d: waits %+v %v", i, ws, err)
		}
		switch {
		case ws[0].State != touba.WaitMatched || ws[0].MatchedQueueID != res.QueueID:
			t.Fatalf("round %d: wait %+v (entry %s), offer %s matched %v: the wait and the offer missed each other",
				i, ws[0], e.Status, res.QueueID, res.Matched)
		case began.State == touba.WaitMatched && e.Status != touba.StatusRunning:
			t.Fatalf("round %d: matched at begin, entry %s; want running", i, e.Status)
		case began.State == touba.WaitOpen && (e.Status != touba.StatusPending || len(res.Matched) != 1):
			t.Fatalf("round %d: open at begin, entry %s, enqueue matched %v; want pending, matched by intake", i, e.Status, res.Matched)
		}
		if by := consumedBy(t, offerer, res.QueueID); by != w.QueueID {
			t.Fatalf("round %d: offer consumed by %q, want %s", i, by, w.QueueID)
		}
		// End the waiter's run, wherever it stands, before the next round.
		if e.Status == touba.StatusPending {
			w = leaseID(t, waiter.Queue, w.QueueID)
		}
		if err := waiter.Queue.Finish(ctx, w.QueueID, w.LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestManyWaitsManyOffersAcrossNodes: n waits and n matching deliveries
// of one value, begun and accepted on two nodes at once: every wait ends
// matched by its own delivery, and every offer is consumed exactly once.
func TestManyWaitsManyOffersAcrossNodes(t *testing.T) {
	ctx := context.Background()
	nodes := openNodes(t, 2, time.Hour)
	const n = 8
	for round := range 5 {
		value := fmt.Sprintf(`"round-%d"`, round)
		var waiters []*touba.Delivery
		for i := range n {
			waiters = append(waiters, leaseOne(t, nodes[i%2].Queue, &touba.Delivery{TriggerRef: waiterRef,
				EventID: fmt.Sprintf("w-%d-%d", round, i), Body: []byte(`{}`)}))
		}
		var fns []func()
		errs := make([]error, 2*n)
		offers := make([]string, n)
		for i, w := range waiters {
			fns = append(fns, func() {
				_, errs[i] = nodes[i%2].Queue.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "paid",
					Kind: touba.WaitEvent, Key: waitKey, Value: value})
			}, func() {
				var res touba.EnqueueResult
				res, errs[n+i] = nodes[(i+1)%2].Queue.Enqueue(ctx, offer(fmt.Sprintf("p-%d-%d", round, i), value))
				offers[i] = res.QueueID
			})
		}
		together(fns...)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, op %d: %v", round, i, err)
			}
		}
		byOffer := map[string]string{}
		for _, w := range waiters {
			ws, err := nodes[0].Queue.Waits(ctx, w.QueueID)
			if err != nil || len(ws) != 1 || ws[0].State != touba.WaitMatched {
				t.Fatalf("round %d: waits of %s: %+v %v; want matched (n waits, n offers)", round, w.QueueID, ws, err)
			}
			if other, dup := byOffer[ws[0].MatchedQueueID]; dup {
				t.Fatalf("round %d: offer %s matched both %s and %s", round, ws[0].MatchedQueueID, other, w.QueueID)
			}
			byOffer[ws[0].MatchedQueueID] = w.QueueID
		}
		for _, id := range offers {
			if by := consumedBy(t, nodes[0], id); by == "" || byOffer[id] != by {
				t.Fatalf("round %d: offer %s consumed by %q, its wait says %q", round, id, by, byOffer[id])
			}
		}
		for i, w := range waiters {
			q := nodes[i%2].Queue
			if e := mustGet(t, q, w.QueueID); e.Status == touba.StatusPending {
				w = leaseID(t, q, w.QueueID)
			}
			if err := q.Finish(ctx, w.QueueID, w.LeaseToken, touba.StatusDone, "", ""); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestOneOfferTwoWaitsAcrossNodes: two waits of one value on two nodes
// and one matching delivery, at once: the offer is consumed by one wait,
// the other stays open (its entry waiting) for the next delivery.
func TestOneOfferTwoWaitsAcrossNodes(t *testing.T) {
	ctx := context.Background()
	nodes := openNodes(t, 2, time.Hour)
	for round := range 20 {
		value := fmt.Sprintf(`"one-%d"`, round)
		w0 := leaseOne(t, nodes[0].Queue, &touba.Delivery{TriggerRef: waiterRef, EventID: fmt.Sprint("a-", round), Body: []byte(`{}`)})
		w1 := leaseOne(t, nodes[1].Queue, &touba.Delivery{TriggerRef: waiterRef, EventID: fmt.Sprint("b-", round), Body: []byte(`{}`)})
		begin := func(st *Store, w *touba.Delivery) func() {
			return func() {
				if _, err := st.Queue.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "paid",
					Kind: touba.WaitEvent, Key: waitKey, Value: value}); err != nil {
					t.Error(err)
				}
			}
		}
		var first touba.EnqueueResult
		together(begin(nodes[0], w0), begin(nodes[1], w1), func() {
			var err error
			if first, err = nodes[round%2].Queue.Enqueue(ctx, offer(fmt.Sprint("o-", round), value)); err != nil {
				t.Error(err)
			}
		})
		if t.Failed() {
			t.FailNow()
		}
		states := map[string]int{}
		var open *touba.Delivery
		for _, w := range []*touba.Delivery{w0, w1} {
			ws, err := nodes[0].Queue.Waits(ctx, w.QueueID)
			if err != nil || len(ws) != 1 {
				t.Fatalf("waits of %s: %+v %v", w.QueueID, ws, err)
			}
			states[ws[0].State]++
			if ws[0].State == touba.WaitOpen {
				open = w
				if e := mustGet(t, nodes[0].Queue, w.QueueID); e.Status != touba.StatusWaiting {
					t.Fatalf("round %d: open wait's entry %s", round, e.Status)
				}
			} else if ws[0].MatchedQueueID != first.QueueID {
				t.Fatalf("round %d: wait %+v; want matched by %s", round, ws[0], first.QueueID)
			}
		}
		if states[touba.WaitMatched] != 1 || states[touba.WaitOpen] != 1 {
			t.Fatalf("round %d: wait states %v; want one matched, one open", round, states)
		}
		// The second delivery ends the other wait.
		second, err := nodes[(round+1)%2].Queue.Enqueue(ctx, offer(fmt.Sprint("o2-", round), value))
		if err != nil || len(second.Matched) != 1 || second.Matched[0] != open.QueueID {
			t.Fatalf("round %d: second delivery matched %v, %v; want %s", round, second.Matched, err, open.QueueID)
		}
		for i, w := range []*touba.Delivery{w0, w1} {
			q := nodes[i].Queue
			if e := mustGet(t, q, w.QueueID); e.Status == touba.StatusPending {
				w = leaseID(t, q, w.QueueID)
			}
			if err := q.Finish(ctx, w.QueueID, w.LeaseToken, touba.StatusDone, "", ""); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sleepers leases n new entries on st and puts each to sleep until at.
func sleepers(t *testing.T, st *Store, n int, at time.Time) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		res, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: waiterRef, EventID: fmt.Sprintf("sleep-%d-%d", at.UnixNano(), i),
			Digest: "d", Body: []byte(`{}`)})
		if err != nil || !res.Created {
			t.Fatalf("enqueue: %+v %v", res, err)
		}
		ids = append(ids, res.QueueID)
	}
	left := map[string]bool{}
	for _, id := range ids {
		left[id] = true
	}
	for len(left) > 0 {
		got, err := st.Queue.Lease(ctx, 100)
		if err != nil || len(got) == 0 {
			t.Fatalf("lease: %v %v", got, err)
		}
		var wg sync.WaitGroup
		for _, d := range got {
			if !left[d.QueueID] {
				// Another test step's entry: out of the way.
				if err := st.Queue.Finish(ctx, d.QueueID, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
					t.Fatal(err)
				}
				continue
			}
			delete(left, d.QueueID)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if w, err := st.Queue.BeginWait(ctx, d.LeaseToken, touba.Wait{QueueID: d.QueueID, StepID: "grace",
					Kind: touba.WaitSleep, WakeAt: &at}); err != nil || w.State != touba.WaitOpen {
					t.Errorf("sleep %s: %+v %v", d.QueueID, w, err)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	var all []string
	rows, err := st.db.pool.Query(ctx, `SELECT queue_id FROM touba.entries WHERE status = 'waiting' AND wake_at = $1`, touba.FormatTime(at))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		rows.Scan(&id)
		all = append(all, id)
	}
	if len(all) != n {
		t.Fatalf("%d entries sleeping, want %d", len(all), n)
	}
	return all
}

// TestWakeSharedByNodes: two nodes waking at once, in small batches, wake
// every due entry exactly once between them.
func TestWakeSharedByNodes(t *testing.T) {
	ctx := context.Background()
	nodes := openNodes(t, 2, time.Hour)
	at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Second)
	const n = 300
	ids := sleepers(t, nodes[0], n, at)
	later := at.Add(time.Hour)
	notDue := sleepers(t, nodes[1], 5, later)
	woke := make([]int64, 2)
	calls := make([]int, 2)
	var fns []func()
	for i, st := range nodes {
		fns = append(fns, func() {
			for {
				k, err := st.Queue.Wake(ctx, time.Now(), 7)
				if err != nil {
					t.Error(err)
					return
				}
				calls[i]++
				woke[i] += k
				if k == 0 {
					return
				}
			}
		})
	}
	together(fns...)
	if woke[0]+woke[1] != n {
		t.Fatalf("woke %v in %v calls; want %d in all, each once", woke, calls, n)
	}
	t.Logf("woken per node: %v", woke)
	for _, id := range ids {
		if e := mustGet(t, nodes[0].Queue, id); e.Status != touba.StatusPending {
			t.Fatalf("entry %s after wake: %s", id, e.Status)
		}
		ws, err := nodes[0].Queue.Waits(ctx, id)
		if err != nil || len(ws) != 1 || ws[0].State != touba.WaitWoke {
			t.Fatalf("wait of %s: %+v %v", id, ws, err)
		}
	}
	for _, id := range notDue {
		if e := mustGet(t, nodes[0].Queue, id); e.Status != touba.StatusWaiting {
			t.Fatalf("entry not due %s after wake: %s", id, e.Status)
		}
	}
	if next, ok, err := nodes[1].Queue.NextWake(ctx); err != nil || !ok || !next.Equal(later) {
		t.Fatalf("next wake %v %v %v; want %v", next, ok, err, later)
	}
}

// TestSleepersOfAStoppedNodeWakeElsewhere: a waiting entry holds no lease:
// the node that put it to sleep gone, another node wakes and runs it, and
// neither a restart of the first under its node id nor a clock far past
// the lease TTL makes it a running entry to requeue or take over.
func TestSleepersOfAStoppedNodeWakeElsewhere(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	open := func(node string, requeue bool, ahead time.Duration) *Store {
		t.Helper()
		st, err := Open(ctx, Config{URL: url, NodeID: node, LeaseTTL: time.Minute, RequeueRunning: requeue,
			ClockOffset: func() time.Duration { return ahead }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a := open("node-a", false, 0)
	at := time.Now().UTC().Truncate(time.Millisecond)
	ids := sleepers(t, a, 3, at)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if again := open("node-a", true, 0); again.Requeued != 0 {
		t.Fatalf("restart of node-a requeued %d entries; its sleepers are not running", again.Requeued)
	}
	b := open("node-b", false, 2*time.Hour) // every lease of node-a long expired by its clock
	if got, err := b.Queue.Lease(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("node-b leased %d entries (%v) before any woke: a waiting entry taken over", len(got), err)
	}
	if n, err := b.Queue.Wake(ctx, time.Now(), 10); err != nil || n != 3 {
		t.Fatalf("node-b woke %d, %v; want 3", n, err)
	}
	got, err := b.Queue.Lease(ctx, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("node-b leased %v, %v; want the 3 woken entries", got, err)
	}
	for _, d := range got {
		if !slices.Contains(ids, d.QueueID) || d.LeaseOwner != "node-b" {
			t.Fatalf("leased %s owned by %q", d.QueueID, d.LeaseOwner)
		}
		w, err := b.Queue.BeginWait(ctx, d.LeaseToken, touba.Wait{QueueID: d.QueueID, StepID: "grace", Kind: touba.WaitSleep, WakeAt: &at})
		if err != nil || w.State != touba.WaitWoke || w.ResolvedAt == nil {
			t.Fatalf("the step again on node-b: %+v %v; want woke", w, err)
		}
		if err := b.Queue.Finish(ctx, d.QueueID, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCancelRacesBeginWaitAcrossNodes: a cancel_on match accepted on one
// node while the entry begins its wait on the other: the entry ends
// cancelled, with no wait left open (which a later delivery's offer would
// match, taking that offer from a live wait).
func TestCancelRacesBeginWaitAcrossNodes(t *testing.T) {
	ctx := context.Background()
	nodes := openNodes(t, 2, time.Hour)
	ck := touba.CancelKey(waiterRef, 0)
	for i := range 40 {
		waiter, canceller := nodes[i%2], nodes[(i+1)%2]
		value := fmt.Sprintf(`"c-%d"`, i)
		w := leaseOne(t, waiter.Queue, &touba.Delivery{TriggerRef: waiterRef, EventID: fmt.Sprint("w-", i), Body: []byte(`{}`),
			CancelKeys: []touba.MatchValue{{Key: ck, Value: value}}})
		var began touba.Wait
		var res touba.EnqueueResult
		var werr, cerr error
		together(
			func() {
				began, werr = waiter.Queue.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "paid",
					Kind: touba.WaitEvent, Key: waitKey, Value: value})
			},
			func() {
				res, cerr = canceller.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:orders/Cancelled",
					EventID: fmt.Sprint("c-", i), Digest: "d", Body: []byte(`{}`), Cancels: []touba.MatchValue{{Key: ck, Value: value}}})
			},
		)
		if werr != nil || cerr != nil {
			t.Fatalf("round %d: begin wait %v, cancel %v", i, werr, cerr)
		}
		if len(res.Cancelled) != 1 {
			t.Fatalf("round %d: cancelled %v", i, res.Cancelled)
		}
		if e := mustGet(t, canceller.Queue, w.QueueID); e.Status != touba.StatusCancelled || e.ErrorCode != touba.ERunCancelled {
			t.Fatalf("round %d: entry %s %s (wait began %s); want cancelled", i, e.Status, e.ErrorCode, began.State)
		}
		ws, err := canceller.Queue.Waits(ctx, w.QueueID)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ws {
			if x.State != touba.WaitCancelled {
				t.Fatalf("round %d: a cancelled entry's wait is %s", i, x.State)
			}
		}
		// So a matching delivery finds no wait to match.
		if r, err := canceller.Queue.Enqueue(ctx, offer(fmt.Sprint("late-", i), value)); err != nil || len(r.Matched) != 0 {
			t.Fatalf("round %d: late offer matched %v, %v", i, r.Matched, err)
		}
	}
}
