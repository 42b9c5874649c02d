package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Gatherings and the rest of the queue: cancel_on and concurrency apply to
// the carrier, replay of a merged entry, restarts, two handles on one
// storage (two nodes), retention.

// testCancelledCarrier: a carrier cancelled while it gathers takes its
// merged deliveries with it (a replay runs them); the key's next delivery
// opens a new gathering, and the dead one's time starts nothing.
func testCancelledCarrier(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, ws := gatherStore(t, e)
	carrier := e.putOf(t, "trigger:g", "c1", func(d *touba.Delivery) {
		d.Gather = debounce(`"c"`)
		d.CancelKeys = []touba.MatchValue{{Key: touba.CancelKey("trigger:g", 0), Value: `"c"`}}
	}).QueueID
	e.gathered(t, "c2", debounce(`"c"`))
	r := e.putOf(t, "trigger:x", "stop", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: touba.CancelKey("trigger:g", 0), Value: `"c"`}}
	})
	if !slices.Equal(r.Cancelled, []string{carrier}) {
		t.Fatalf("cancelled %v, want the carrier %s", r.Cancelled, carrier)
	}
	e.lease(t, 10, r.QueueID)
	e.wantStatus(t, carrier, touba.StatusCancelled, touba.ERunCancelled)
	e.wantGatherCounts(t, gs, 0, 1)
	e.clock.Add(time.Second)
	next := e.gathered(t, "c3", debounce(`"c"`))
	if next.Gather != touba.GatherOpened {
		t.Fatalf("after the cancel: %+v, want a new gathering", next)
	}
	if g := e.gathering(t, gs, carrier); g.State != touba.GatheringClosed || g.Live {
		t.Fatalf("the cancelled carrier's gathering: %+v, want closed", g)
	}
	e.wantNextWake(t, ws, ptr(e.clock.Now().Add(5*time.Second)))
	e.wantGathered(t, gs, carrier, "c2")
	// Replayed, the cancelled carrier runs with what it gathered.
	res, err := e.Queue.Replay(e.ctx, []string{carrier}, touba.ReplayOptions{})
	if err != nil || len(res) != 1 || res[0].To != touba.StatusPending {
		t.Fatalf("replay of the cancelled carrier: %+v, %v", res, err)
	}
	e.lease(t, 10, carrier)
	e.wantGathered(t, gs, carrier, "c2")
	// Its old gathering stays dead while its run goes on.
	if r := e.gathered(t, "c4", debounce(`"c"`)); r.Carrier != next.QueueID {
		t.Fatalf("c4: %+v, want merged into the live gathering %s", r, next.QueueID)
	}
}

// testReplayMerged: replaying a merged entry replays its carrier.
func testReplayMerged(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, _ := gatherStore(t, e)
	carrier := e.gathered(t, "r1", batchOf(`"r"`, 2)).QueueID
	m := e.gathered(t, "r2", batchOf(`"r"`, 2))
	if m.Gather != touba.GatherStarted {
		t.Fatalf("second of a batch of two: %q, want started", m.Gather)
	}
	e.lease(t, 10, carrier)
	e.finish(t, carrier, touba.StatusFailed)
	res, err := e.Queue.Replay(e.ctx, []string{m.QueueID}, touba.ReplayOptions{})
	if err != nil || len(res) != 1 || res[0].QueueID != carrier || res[0].From != touba.StatusFailed || res[0].To != touba.StatusPending {
		t.Fatalf("replay of the merged %s: %+v, %v; want its carrier %s replayed", m.QueueID, res, err, carrier)
	}
	e.wantStatus(t, m.QueueID, touba.StatusMerged, "")
	e.lease(t, 10, carrier)
	e.wantGathered(t, gs, carrier, "r2")
}

// testGatherRestart: an open gathering survives a clean restart, goes on
// gathering, and starts on time.
func testGatherRestart(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	carrier := e.gathered(t, "x1", debounce(`"x"`)).QueueID
	e = e.reopen(t)
	gs, ws := gatherStore(t, e)
	e.clock.Add(time.Second)
	if r := e.gathered(t, "x2", debounce(`"x"`)); r.Carrier != carrier {
		t.Fatalf("after the restart: %+v, want merged into %s", r, carrier)
	}
	e.wantNextWake(t, ws, ptr(e.clock.Now().Add(5*time.Second)))
	e.clock.Add(5 * time.Second)
	e.startDue(t, gs, e.clock.Now(), 1)
	e.lease(t, 10, carrier)
	e.wantGathered(t, gs, carrier, "x2")
}

// testGatherTwoHandles: deliveries of one key through two handles on one
// storage at once (two nodes) make one gathering; the gathering starts
// once however many handles start due ones.
func testGatherTwoHandles(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	o := e.again(t)
	gs, _ := gatherStore(t, e)
	ogs, _ := gatherStore(t, o)
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		go func() {
			h := e
			if i%2 == 1 {
				h = o
			}
			d := delivery(fmt.Sprintf("t%02d", i), fmt.Sprintf(`{"id":%d}`, i))
			d.TriggerRef, d.Gather = "trigger:g", debounce(`"t"`)
			_, err := h.Queue.Enqueue(h.ctx, d)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	e.wantGatherCounts(t, gs, 1, n-1)
	e.clock.Add(time.Minute)
	started := make(chan int64, 2)
	for _, s := range []touba.GatherStore{gs, ogs} {
		go func() {
			k, err := s.StartDue(e.ctx, e.clock.Now(), 100)
			if err != nil {
				t.Errorf("start due: %v", err)
			}
			started <- k
		}()
	}
	if a, b := <-started, <-started; a+b != 1 {
		t.Fatalf("started %d and %d, want one gathering started once", a, b)
	}
	got, err := e.Queue.Lease(e.ctx, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %d entries (%v), want the one carrier", len(got), err)
	}
	list, err := gs.Gathered(e.ctx, got[0].QueueID)
	if err != nil || len(list) != n-1 {
		t.Fatalf("gathered %d (%v), want %d", len(list), err, n-1)
	}
}

// testGatherRetention: the bodies of merged entries go once their carrier
// is done (its run read them), not before.
func testGatherRetention(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, _ := gatherStore(t, e)
	carrier := e.gathered(t, "k1", batchOf(`"k"`, 2)).QueueID
	m := e.gathered(t, "k2", batchOf(`"k"`, 2)).QueueID
	e.clock.Add(time.Hour)
	if _, err := e.Queue.PurgeBodies(e.ctx, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.wantGathered(t, gs, carrier, "k2") // bodies kept: the run has not read them
	e.lease(t, 10, carrier)
	e.finish(t, carrier, touba.StatusDone)
	e.clock.Add(time.Hour)
	if _, err := e.Queue.PurgeBodies(e.ctx, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if d := e.get(t, m); d.Body != nil {
		t.Fatalf("merged entry of a done carrier kept its body past retention")
	}
}

// testCarrierKey: concurrency applies to the carrier. Waiting in its
// gathering it holds its key, in acceptance order, like a sleeping entry:
// a later entry of the key (here one whose gathering key resolved to
// nothing) waits behind it, and goes once the carrier's run ended. A
// merged entry holds nothing.
func testCarrierKey(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, _ := gatherStore(t, e)
	keyed := func(d *touba.Delivery) { d.ConcKey, d.ConcMax = `"c1"`, 1 }
	carrier := e.putOf(t, "trigger:g", "k1", func(d *touba.Delivery) { keyed(d); d.Gather = debounce(`"p"`) }).QueueID
	later := e.putOf(t, "trigger:g", "k2", keyed).QueueID
	e.putOf(t, "trigger:g", "k3", func(d *touba.Delivery) { keyed(d); d.Gather = debounce(`"p"`) })
	e.lease(t, 10)
	e.clock.Add(5 * time.Second)
	e.startDue(t, gs, e.clock.Now(), 1)
	e.lease(t, 10, carrier)
	e.lease(t, 10)
	e.finish(t, carrier, touba.StatusDone)
	e.lease(t, 10, later)
}
