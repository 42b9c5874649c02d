package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Gatherings (touba.GatherStore, SPEC §2.1 debounce and batch): deliveries
// of one key value gathered into one run, each keeping its own identity.
func runGather(t *testing.T, f Factory) {
	t.Run("DebounceGathersAKey", func(t *testing.T) { testDebounceGathers(t, f) })
	t.Run("DebounceMaxWait", func(t *testing.T) { testDebounceMaxWait(t, f) })
	t.Run("BatchBySize", func(t *testing.T) { testBatchBySize(t, f) })
	t.Run("BatchWindowAndNoKey", func(t *testing.T) { testBatchWindow(t, f) })
	t.Run("MergedIdentity", func(t *testing.T) { testMergedIdentity(t, f) })
	t.Run("CancelledCarrierLeavesItsKey", func(t *testing.T) { testCancelledCarrier(t, f) })
	t.Run("ReplayMergedReplaysCarrier", func(t *testing.T) { testReplayMerged(t, f) })
	t.Run("SurvivesRestart", func(t *testing.T) { testGatherRestart(t, f) })
	t.Run("TwoHandlesOneGathering", func(t *testing.T) { testGatherTwoHandles(t, f) })
	t.Run("RetentionOfMerged", func(t *testing.T) { testGatherRetention(t, f) })
	t.Run("CarrierHoldsItsConcurrencyKey", func(t *testing.T) { testCarrierKey(t, f) })
	t.Run("MaxBytes", func(t *testing.T) { testGatherMaxBytes(t, f) })
}

func gatherStore(t *testing.T, e *env) (touba.GatherStore, touba.WaitStore) {
	t.Helper()
	gs, ok := e.Queue.(touba.GatherStore)
	if !ok {
		t.Skip("the queue store keeps no gatherings (touba.GatherStore)")
	}
	return gs, waitStore(t, e)
}

// The gathering specs of the cases: trigger:g debounced per value with a
// 5 s window and a 12 s bound, and batched by tens within 10 s.
func debounce(value string) *touba.GatherSpec {
	return &touba.GatherSpec{Kind: touba.GatherDebounce, Key: touba.GatherKeyOf(touba.GatherDebounce, "/event/body/p"),
		Value: value, Window: 5 * time.Second, MaxWait: 12 * time.Second}
}

func batchOf(value string, size int) *touba.GatherSpec {
	key := "/event/body/p"
	if value == "" {
		key = ""
	}
	return &touba.GatherSpec{Kind: touba.GatherBatch, Key: touba.GatherKeyOf(touba.GatherBatch, key), Value: value,
		Window: 10 * time.Second, MaxSize: size}
}

// gathered enqueues a new delivery of trigger:g with spec g.
func (e *env) gathered(t *testing.T, eventID string, g *touba.GatherSpec) touba.EnqueueResult {
	t.Helper()
	return e.putOf(t, "trigger:g", eventID, func(d *touba.Delivery) { d.Gather = g })
}

// wantGathered checks what carrier's run would see merged into it.
func (e *env) wantGathered(t *testing.T, gs touba.GatherStore, carrier string, eventIDs ...string) {
	t.Helper()
	list, err := gs.Gathered(e.ctx, carrier)
	if err != nil {
		t.Fatalf("gathered into %s: %v", carrier, err)
	}
	got := make([]string, len(list))
	for i, d := range list {
		got[i] = d.EventID
		if d.Status != touba.StatusMerged || d.MergedInto != carrier || len(d.Body) == 0 {
			t.Fatalf("gathered %s: status %s merged into %q, %d body bytes; want merged into %s with its body",
				d.QueueID, d.Status, d.MergedInto, len(d.Body), carrier)
		}
	}
	if !slices.Equal(got, eventIDs) {
		t.Fatalf("gathered into %s: %v, want %v", carrier, got, eventIDs)
	}
}

func (e *env) gathering(t *testing.T, gs touba.GatherStore, carrier string) touba.Gathering {
	t.Helper()
	g, err := gs.Gathering(e.ctx, carrier)
	if err != nil || g == nil {
		t.Fatalf("gathering of %s: %v, %v", carrier, g, err)
	}
	return *g
}

func (e *env) startDue(t *testing.T, gs touba.GatherStore, at time.Time, want int64) {
	t.Helper()
	if n, err := gs.StartDue(e.ctx, at, 100); err != nil || n != want {
		t.Fatalf("start gatherings due at %v: %d, %v; want %d", at, n, err, want)
	}
}

func (e *env) wantGatherCounts(t *testing.T, gs touba.GatherStore, open, merged int64) {
	t.Helper()
	o, m, err := gs.GatherCounts(e.ctx)
	if err != nil || o != open || m != merged {
		t.Fatalf("gather counts: open %d merged %d (%v), want %d and %d", o, m, err, open, merged)
	}
}

func ids(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i+1)
	}
	return out
}

// testDebounceGathers: 20 deliveries of one key 300 ms apart make one
// gathering; its carrier waits (not leased, not pending) and the 19 others
// end merged; the gathering starts 5 s after the last, and its run sees
// the 19 in acceptance order. Another key's delivery opens its own.
func testDebounceGathers(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, ws := gatherStore(t, e)
	evs := ids(20, "p1-")
	var carrier string
	for i, ev := range evs {
		if i > 0 {
			e.clock.Add(300 * time.Millisecond)
		}
		r := e.gathered(t, ev, debounce(`"p1"`))
		switch {
		case i == 0 && (r.Gather != touba.GatherOpened || r.Carrier != r.QueueID):
			t.Fatalf("first delivery: gather %q carrier %q, want opened by itself", r.Gather, r.Carrier)
		case i == 0:
			carrier = r.QueueID
		case r.Gather != touba.GatherMerged || r.Carrier != carrier:
			t.Fatalf("delivery %d: gather %q carrier %q, want merged into %s", i+1, r.Gather, r.Carrier, carrier)
		}
		if want := e.clock.Now().Add(5 * time.Second); !r.GatherWake.Equal(want) {
			t.Fatalf("delivery %d: the gathering starts at %v, want %v", i+1, r.GatherWake, want)
		}
	}
	other := e.gathered(t, "p2-01", debounce(`"p2"`))
	if other.Gather != touba.GatherOpened || other.Carrier == carrier {
		t.Fatalf("another key: %+v, want a gathering of its own", other)
	}
	e.wantPending(t, 0)
	e.lease(t, 10)
	e.wantStatus(t, carrier, touba.StatusWaiting, "")
	m := e.entryOf(t, "trigger:g", evs[5])
	if d := e.wantStatus(t, m, touba.StatusMerged, ""); d.MergedInto != carrier {
		t.Fatalf("merged entry names carrier %q, want %s", d.MergedInto, carrier)
	}
	e.wantGatherCounts(t, gs, 2, 19)
	last := e.clock.Now()
	e.wantNextWake(t, ws, ptr(last.Add(5*time.Second)))
	g := e.gathering(t, gs, carrier)
	if g.State != touba.GatheringOpen || !g.Live || g.Size != 20 || g.Kind != touba.GatherDebounce || g.Value != `"p1"` ||
		!g.OpenedAt.Equal(Epoch) || !g.LastAt.Equal(last) || !g.Deadline.Equal(Epoch.Add(12*time.Second)) {
		t.Fatalf("open gathering: %+v", g)
	}

	e.startDue(t, gs, last.Add(5*time.Second-time.Millisecond), 0)
	e.wantStatus(t, carrier, touba.StatusWaiting, "")
	e.clock.Add(5 * time.Second)
	e.startDue(t, gs, e.clock.Now(), 2) // both keys' gatherings
	e.wantPending(t, 2)
	e.lease(t, 10, carrier, other.QueueID)
	e.wantGathered(t, gs, carrier, evs[1:]...)
	e.wantGathered(t, gs, other.QueueID)
	if g := e.gathering(t, gs, carrier); g.State != touba.GatheringStarted || g.Live || g.StartedAt == nil || g.Size != 20 {
		t.Fatalf("started gathering: %+v", g)
	}
	e.wantGatherCounts(t, gs, 0, 19)
	e.wantNextWake(t, ws, nil)
	// The next delivery of the key opens the next gathering.
	if r := e.gathered(t, "p1-21", debounce(`"p1"`)); r.Gather != touba.GatherOpened || r.Carrier == carrier {
		t.Fatalf("after the start: %+v, want a new gathering", r)
	}
}

// testDebounceMaxWait: a storm that never pauses for the window starts
// max_wait after its first delivery all the same.
func testDebounceMaxWait(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, ws := gatherStore(t, e)
	carrier := e.gathered(t, "s-00", debounce(`"s"`)).QueueID
	deadline := Epoch.Add(12 * time.Second)
	for i := 1; i <= 14; i++ {
		e.clock.Add(time.Second)
		if e.clock.Now().Before(deadline) {
			e.startDue(t, gs, e.clock.Now(), 0)
		}
		r := e.gathered(t, fmt.Sprintf("s-%02d", i), debounce(`"s"`))
		want := e.clock.Now().Add(5 * time.Second)
		if want.After(deadline) {
			want = deadline
		}
		if e.clock.Now().Before(deadline) && (r.Carrier != carrier || !r.GatherWake.Equal(want)) {
			t.Fatalf("delivery at +%ds: %+v, want merged into %s, starting at %v", i, r, carrier, want)
		}
		if i == 11 {
			e.wantNextWake(t, ws, &deadline)
			e.clock.Add(time.Second) // the deadline: +12 s
			e.startDue(t, gs, e.clock.Now(), 1)
			e.clock.Add(-time.Second)
		}
	}
	e.wantGathered(t, gs, carrier, ids(11, "s-")...)
	// The three after the deadline are the next gathering.
	next := e.entryOf(t, "trigger:g", "s-12")
	e.wantGathered(t, gs, next, "s-13", "s-14")
}

// testBatchBySize: 25 deliveries with max_size 10 make gatherings of 10,
// 10 and 5: a full one starts in the transaction of its tenth delivery,
// the last one at its window's end.
func testBatchBySize(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, _ := gatherStore(t, e)
	evs := ids(25, "b")
	var carriers []string
	for i, ev := range evs {
		r := e.gathered(t, ev, batchOf(`"k"`, 10))
		switch i % 10 {
		case 0:
			if r.Gather != touba.GatherOpened {
				t.Fatalf("delivery %d: %q, want opened", i+1, r.Gather)
			}
			carriers = append(carriers, r.QueueID)
		case 9:
			if r.Gather != touba.GatherStarted || r.Carrier != carriers[len(carriers)-1] {
				t.Fatalf("delivery %d: %+v, want the batch full and started", i+1, r)
			}
			e.wantStatus(t, r.Carrier, touba.StatusPending, "")
		default:
			if r.Gather != touba.GatherMerged {
				t.Fatalf("delivery %d: %q, want merged", i+1, r.Gather)
			}
		}
	}
	e.wantPending(t, 2)
	e.lease(t, 10, carriers[0], carriers[1])
	e.wantGathered(t, gs, carriers[0], evs[1:10]...)
	e.wantGathered(t, gs, carriers[1], evs[11:20]...)
	e.wantStatus(t, carriers[2], touba.StatusWaiting, "")
	e.clock.Add(10 * time.Second)
	e.startDue(t, gs, e.clock.Now(), 1)
	e.lease(t, 10, carriers[2])
	e.wantGathered(t, gs, carriers[2], evs[21:]...)
	for i, c := range carriers {
		if g := e.gathering(t, gs, c); g.Size != []int{10, 10, 5}[i] || g.State != touba.GatheringStarted {
			t.Fatalf("batch %d: %+v", i+1, g)
		}
	}
}

// testBatchWindow: a batch without a key is one gathering for the
// trigger, started window after its first delivery however many came
// since (a batch's time does not move).
func testBatchWindow(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, ws := gatherStore(t, e)
	carrier := e.gathered(t, "w1", batchOf("", 100)).QueueID
	e.clock.Add(9 * time.Second)
	if r := e.gathered(t, "w2", batchOf("", 100)); r.Carrier != carrier || !r.GatherWake.Equal(Epoch.Add(10*time.Second)) {
		t.Fatalf("second delivery: %+v, want merged, the start unmoved", r)
	}
	e.wantNextWake(t, ws, ptr(Epoch.Add(10*time.Second)))
	e.clock.Add(time.Second)
	e.startDue(t, gs, e.clock.Now(), 1)
	e.lease(t, 10, carrier)
	e.wantGathered(t, gs, carrier, "w2")
}

// testMergedIdentity: a merged entry keeps its identity: its exact
// redelivery finds it past pending (200 consumed at intake), another body
// under its id is a conflict, and neither joins the gathering again.
func testMergedIdentity(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, _ := gatherStore(t, e)
	e.gathered(t, "i1", debounce(`"i"`))
	m := e.gathered(t, "i2", debounce(`"i"`))
	d := delivery("i2", `{"id":"i2"}`)
	d.TriggerRef, d.Gather = "trigger:g", debounce(`"i"`)
	r := e.enqueue(t, d)
	if r.Created || r.QueueID != m.QueueID || r.Status != touba.StatusMerged || r.Digest != d.Digest || r.Gather != "" {
		t.Fatalf("redelivery of a merged entry: %+v, want its entry, merged, same digest", r)
	}
	d = delivery("i2", `{"id":"other"}`)
	d.TriggerRef, d.Gather = "trigger:g", debounce(`"i"`)
	if r := e.enqueue(t, d); r.Created || r.QueueID != m.QueueID || r.Digest == d.Digest {
		t.Fatalf("conflict with a merged entry: %+v, want its entry and its own digest", r)
	}
	if g := e.gathering(t, gs, m.Carrier); g.Size != 2 {
		t.Fatalf("gathering after redeliveries: size %d, want 2", g.Size)
	}
}

func ptr(t time.Time) *time.Time { return &t }
