package storetest

import (
	"fmt"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// Routes (SPEC §2.4): a new entry of an accepting trigger carries its
// routes' entries (Delivery.Routes), stored in the same transaction, each
// under (route, event id); a duplicate, a conflict or a consumed
// redelivery at the accepting trigger creates nothing anywhere.
func runRoutes(t *testing.T, f Factory) {
	t.Run("FanOut", func(t *testing.T) { testRoutesFanOut(t, f) })
	t.Run("RedeliveryCreatesNothing", func(t *testing.T) { testRoutesRedelivery(t, f) })
	t.Run("DoneAtOnce", func(t *testing.T) { testRoutesDoneAtOnce(t, f) })
	t.Run("RouteIdentityHeld", func(t *testing.T) { testRoutesIdentityHeld(t, f) })
	t.Run("NoEventID", func(t *testing.T) { testRoutesNoEventID(t, f) })
	t.Run("KeyedRoute", func(t *testing.T) { testRoutesKeyed(t, f) })
	t.Run("KeyedAcceptingDurableRoute", func(t *testing.T) { testRoutesKeyedAccepting(t, f) })
	t.Run("Concurrent", func(t *testing.T) { testRoutesConcurrent(t, f) })
}

// routed is a delivery of trigger:t with event id and body, fed to the
// routes named (trigger:r<n>), and not to the ones in filtered: what
// intake hands the queue (trigger.SetRoutes).
func routed(eventID, body string, fed []string, filtered ...string) *touba.Delivery {
	d := delivery(eventID, body)
	d.Routing = &touba.Routing{}
	for _, ref := range fed {
		r := delivery(eventID, body)
		r.TriggerRef = ref
		d.Routes = append(d.Routes, r)
		d.Routing.Routes = append(d.Routing.Routes, touba.RouteOutcome{TriggerRef: ref, Fed: true})
	}
	for _, ref := range filtered {
		d.Routing.Routes = append(d.Routing.Routes, touba.RouteOutcome{TriggerRef: ref, Code: touba.IntakeFiltered})
	}
	return d
}

// byTrigger counts the queue's entries by trigger.
func (e *env) byTrigger(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range e.entries(t) {
		out[d.TriggerRef]++
	}
	return out
}

// detail reads an entry's detail, which must exist.
func (e *env) detail(t *testing.T, queueID string) *touba.EntryDetail {
	t.Helper()
	d, err := e.Queue.Detail(e.ctx, queueID)
	if err != nil || d == nil {
		t.Fatalf("detail %s: %v, %v", queueID, d, err)
	}
	return d
}

func testRoutesFanOut(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	d := routed("evt-1", `{"type":"a"}`, []string{"trigger:r1", "trigger:r3"}, "trigger:r2")
	r := e.enqueue(t, d)
	if !r.Created || len(r.Routes) != 2 || !r.Routes[0].Created || !r.Routes[1].Created {
		t.Fatalf("result %+v, want a new entry and two new route entries", r)
	}
	if got := e.byTrigger(t); got["trigger:t"] != 1 || got["trigger:r1"] != 1 || got["trigger:r3"] != 1 || len(got) != 3 {
		t.Fatalf("entries by trigger %v, want one each of t, r1 and r3", got)
	}
	for i, ref := range []string{"trigger:r1", "trigger:r3"} {
		got := e.get(t, r.Routes[i].QueueID)
		if got.TriggerRef != ref || got.EventID != "evt-1" || got.Digest != d.Digest || string(got.Body) != `{"type":"a"}` ||
			got.Headers["Content-Type"] != "application/json" || got.Status != touba.StatusPending || !got.ReceivedAt.Equal(d.ReceivedAt) {
			t.Fatalf("route entry %d: %+v, want %s's copy of the delivery, pending", i, got, ref)
		}
		if det := e.detail(t, got.QueueID); det.Routing == nil || det.Routing.From != r.QueueID {
			t.Fatalf("route entry %s routing %+v, want from %s", got.QueueID, det.Routing, r.QueueID)
		}
	}
	if n := e.Queue.Pending(); n != 3 {
		t.Fatalf("pending %d, want 3", n)
	}
	det := e.detail(t, r.QueueID)
	want := []touba.RouteOutcome{{TriggerRef: "trigger:r1", Fed: true, QueueID: r.Routes[0].QueueID},
		{TriggerRef: "trigger:r3", Fed: true, QueueID: r.Routes[1].QueueID}, {TriggerRef: "trigger:r2", Code: touba.IntakeFiltered}}
	if det.Routing == nil || fmt.Sprint(det.Routing.Routes) != fmt.Sprint(want) {
		t.Fatalf("accepting entry's routing %+v, want %v", det.Routing, want)
	}
	// A clean restart keeps them all.
	e = e.reopen(t)
	if got := e.byTrigger(t); got["trigger:t"] != 1 || got["trigger:r1"] != 1 || got["trigger:r3"] != 1 {
		t.Fatalf("after a restart: %v", got)
	}
}

func testRoutesRedelivery(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	first := e.enqueue(t, routed("evt-1", `{"n":1}`, []string{"trigger:r1", "trigger:r2"}))
	// The same delivery again: a duplicate of the pending entry.
	dup := e.enqueue(t, routed("evt-1", `{"n":1}`, []string{"trigger:r1", "trigger:r2"}))
	if dup.Created || dup.QueueID != first.QueueID || len(dup.Routes) != 0 {
		t.Fatalf("redelivery: %+v, want the first entry's answer and no route result", dup)
	}
	// Another body under the same id: a conflict.
	conflict := e.enqueue(t, routed("evt-1", `{"n":2}`, []string{"trigger:r1", "trigger:r2"}))
	if conflict.Created || conflict.QueueID != first.QueueID || conflict.Digest == digest(`{"n":2}`) {
		t.Fatalf("conflict: %+v, want the first entry's", conflict)
	}
	// Consumed: the accepting entry done, then the same delivery again.
	leased, err := e.Queue.Lease(e.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leased {
		if l.QueueID == first.QueueID {
			if err := e.Queue.Finish(e.ctx, l.QueueID, l.LeaseToken, touba.StatusDone, "", ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	consumed := e.enqueue(t, routed("evt-1", `{"n":1}`, []string{"trigger:r1", "trigger:r2"}))
	if consumed.Created || consumed.Status != touba.StatusDone {
		t.Fatalf("consumed redelivery: %+v, want the done entry's answer", consumed)
	}
	if got := e.byTrigger(t); got["trigger:t"] != 1 || got["trigger:r1"] != 1 || got["trigger:r2"] != 1 {
		t.Fatalf("entries by trigger %v, want one each: redeliveries create nothing anywhere", got)
	}
}

func testRoutesDoneAtOnce(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	d := routed("evt-1", `{}`, []string{"trigger:r1"})
	d.Done = true
	r := e.enqueue(t, d)
	if !r.Created || r.Status != touba.StatusDone {
		t.Fatalf("result %+v, want a new entry, done", r)
	}
	if got := e.get(t, r.QueueID); got.Status != touba.StatusDone {
		t.Fatalf("accepting entry %s, want done", got.Status)
	}
	if n := e.Queue.Pending(); n != 1 {
		t.Fatalf("pending %d, want 1 (the route's entry only)", n)
	}
	leased, err := e.Queue.Lease(e.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(leased) != 1 || leased[0].TriggerRef != "trigger:r1" {
		t.Fatalf("leased %d entries, want the route's only", len(leased))
	}
	// Its redelivery is consumed: nothing created.
	again := e.enqueue(t, routed("evt-1", `{}`, []string{"trigger:r1"}))
	if again.Created || again.Status != touba.StatusDone || again.QueueID != r.QueueID {
		t.Fatalf("redelivery %+v, want the done entry's answer", again)
	}
}

func testRoutesIdentityHeld(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	// An entry of r1 holds (r1, evt-1) already (an operator's replay of a
	// delivery logged under the route, say).
	held := delivery("evt-1", `{}`)
	held.TriggerRef = "trigger:r1"
	old := e.enqueue(t, held)
	r := e.enqueue(t, routed("evt-1", `{}`, []string{"trigger:r1", "trigger:r2"}))
	if !r.Created || len(r.Routes) != 2 || r.Routes[0].Created || r.Routes[0].QueueID != old.QueueID || !r.Routes[1].Created {
		t.Fatalf("result %+v, want r1's existing entry %s and a new one of r2", r, old.QueueID)
	}
	det := e.detail(t, r.QueueID)
	if det.Routing == nil || len(det.Routing.Routes) != 2 {
		t.Fatalf("routing %+v", det.Routing)
	}
	if o := det.Routing.Routes[0]; o.Fed || o.QueueID != old.QueueID || o.Code != touba.IntakeDuplicate {
		t.Fatalf("r1's outcome %+v, want not fed: held by %s", o, old.QueueID)
	}
	if o := det.Routing.Routes[1]; !o.Fed || o.QueueID != r.Routes[1].QueueID {
		t.Fatalf("r2's outcome %+v, want fed %s", o, r.Routes[1].QueueID)
	}
}

func testRoutesNoEventID(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	for range 2 {
		if r := e.enqueue(t, routed("", `{}`, []string{"trigger:r1"})); !r.Created || len(r.Routes) != 1 || !r.Routes[0].Created {
			t.Fatalf("result %+v, want new entries", r)
		}
	}
	if got := e.byTrigger(t); got["trigger:t"] != 2 || got["trigger:r1"] != 2 {
		t.Fatalf("entries %v, want two of each: no identity, no dedupe", got)
	}
}

func testRoutesKeyed(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var routes []touba.EnqueueResult
	for i := range 2 {
		d := routed(fmt.Sprintf("evt-%d", i), `{}`, []string{"trigger:r1"})
		d.Routes[0].ConcKey, d.Routes[0].ConcMax = `"cus_1"`, 1
		r := e.enqueue(t, d)
		routes = append(routes, r.Routes[0])
	}
	if a, b := e.get(t, routes[0].QueueID), e.get(t, routes[1].QueueID); a.Held || !b.Held || a.ConcKey != `"cus_1"` {
		t.Fatalf("route entries held %v, %v (key %q), want the second held behind the first", a.Held, b.Held, a.ConcKey)
	}
}

// testRoutesConcurrent: many deliveries of one identity at once, from
// several callers (nodes, on a shared store), make one accepting entry
// and one entry per route.
func testRoutesConcurrent(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	stores := []*env{e, e.again(t)}
	var mu sync.Mutex
	created := 0
	parallel(t, 16, func(i int) error {
		r, err := stores[i%2].Queue.Enqueue(e.ctx, routed("evt-1", `{}`, []string{"trigger:r1", "trigger:r2"}))
		if err != nil {
			return err
		}
		if r.Created {
			mu.Lock()
			created++
			mu.Unlock()
		}
		return nil
	})
	if got := e.byTrigger(t); created != 1 || got["trigger:t"] != 1 || got["trigger:r1"] != 1 || got["trigger:r2"] != 1 {
		t.Fatalf("%d created, entries %v: want one of each", created, got)
	}
}

// testRoutesKeyedAccepting: a keyed accepting entry with a plain route,
// and a plain one with a route holding a cancel key, each fan out (the
// paths a backend may take apart), and a route's cancel key cancels.
func testRoutesKeyedAccepting(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	d := routed("evt-1", `{}`, []string{"trigger:r1"})
	d.ConcKey, d.ConcMax = `"k"`, 1
	if r := e.enqueue(t, d); !r.Created || len(r.Routes) != 1 || !r.Routes[0].Created {
		t.Fatalf("keyed accepting: %+v, want its route's entry", r)
	}
	d = routed("evt-2", `{}`, []string{"trigger:r1", "trigger:r2"})
	d.Routes[1].CancelKeys = []touba.MatchValue{{Key: touba.CancelKeyOf("trigger:r2", "trigger:stop", "/body/id", []byte(`"x"`)), Value: `"x"`}}
	r := e.enqueue(t, d)
	if !r.Created || len(r.Routes) != 2 || !r.Routes[0].Created || !r.Routes[1].Created {
		t.Fatalf("route with a cancel key: %+v, want both route entries", r)
	}
	stop := delivery("s1", `{"id":"x"}`)
	stop.TriggerRef = "trigger:stop"
	stop.Cancels = []touba.MatchValue{{Key: touba.CancelKeyOf("trigger:r2", "trigger:stop", "/body/id", []byte(`"x"`)), Value: `"x"`}}
	if got := e.enqueue(t, stop); len(got.Cancelled) != 1 || got.Cancelled[0] != r.Routes[1].QueueID {
		t.Fatalf("cancel: %+v, want r2's entry %s cancelled", got, r.Routes[1].QueueID)
	}
	if got := e.byTrigger(t); got["trigger:t"] != 2 || got["trigger:r1"] != 2 || got["trigger:r2"] != 1 {
		t.Fatalf("entries %v", got)
	}
}
