package storetest

import (
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// testHistoryGatherings: a merged delivery goes with its carrier. A
// finished carrier past the window is forgotten with the deliveries it
// gathered and its gathering; a failed one keeps them all, since a
// replay of it reads them in /events (SPEC §2.1, §8.1).
func testHistoryGatherings(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	h := historyStore(t, e)
	gs, _ := gatherStore(t, e)
	carriers := map[string]string{}
	for _, key := range []string{"done", "failed"} {
		for i, ev := range []string{key + "-1", key + "-2", key + "-3"} {
			r := e.gathered(t, ev, debounce(`"`+key+`"`))
			if i == 0 {
				carriers[key] = r.QueueID
			}
		}
	}
	e.clock.Add(6 * time.Second)
	e.startDue(t, gs, e.clock.Now(), 2)
	e.lease(t, 10, carriers["done"], carriers["failed"])
	e.finish(t, carriers["done"], touba.StatusDone)
	e.finish(t, carriers["failed"], touba.StatusFailed)

	e.clock.Add(400 * 24 * time.Hour)
	if r := e.prune(t, h, e.clock.Now().Add(-24*time.Hour)); r.Entries != 3 {
		t.Fatalf("pass forgot %+v, want the done carrier and its 2 merged deliveries", r)
	}
	for _, ev := range []string{"done-1", "done-2", "done-3"} {
		for _, d := range e.entries(t) {
			if d.EventID == ev {
				t.Fatalf("entry %s (%s) of the done gathering kept", d.QueueID, ev)
			}
		}
	}
	if g, err := gs.Gathering(e.ctx, carriers["done"]); err != nil || g != nil {
		t.Fatalf("gathering of the forgotten carrier: %+v (%v), want gone", g, err)
	}
	e.wantStatus(t, carriers["failed"], touba.StatusFailed, "")
	e.wantGathered(t, gs, carriers["failed"], "failed-2", "failed-3")
	e.gathering(t, gs, carriers["failed"])
	// Past the window, a merged delivery's redelivery is a new delivery;
	// the failed carrier's still answer from their entries.
	if r := e.gathered(t, "done-2", debounce(`"done"`)); !r.Created {
		t.Fatalf("redelivery of a forgotten merged delivery: %+v, want a new entry", r)
	}
	again := delivery("failed-2", `{"id":"failed-2"}`)
	again.TriggerRef, again.Gather = "trigger:g", debounce(`"failed"`)
	if r := e.enqueue(t, again); r.Created || r.Status != touba.StatusMerged {
		t.Fatalf("redelivery of a kept merged delivery: %+v, want its merged entry", r)
	}
}
