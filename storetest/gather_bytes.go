package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// A gathering's bodies are bounded (max_bytes, issue 43), as its count
// is: the delivery that brings them to the bound or past it is merged and
// starts the gathering at once; the next opens a new one. The count is
// kept with the gathering, so it survives the store being opened again.
func testGatherMaxBytes(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	gs, _ := gatherStore(t, e)
	const body = 1000 // bytes of each delivery's body
	spec := func() *touba.GatherSpec {
		g := debounce(`"big"`)
		g.MaxBytes = 3500 // the fourth delivery passes it
		return g
	}
	put := func(eventID string) touba.EnqueueResult {
		t.Helper()
		return e.putOf(t, "trigger:g", eventID, func(d *touba.Delivery) {
			b := fmt.Sprintf(`{"id":%q,"pad":"`, eventID)
			b += strings.Repeat("x", body-len(b)-2) + `"}`
			d.Body, d.Digest, d.Gather = []byte(b), digest(b), spec()
		})
	}
	carrier := put("mb-1").QueueID
	for i := 2; i <= 3; i++ {
		if r := put(fmt.Sprintf("mb-%d", i)); r.Gather != touba.GatherMerged || r.Carrier != carrier {
			t.Fatalf("delivery %d (%d bytes gathered): %+v, want merged, the gathering open", i, i*body, r)
		}
	}
	if g := e.gathering(t, gs, carrier); g.State != touba.GatheringOpen || g.Size != 3 || g.StartedAt != nil || g.Bytes != 3*body {
		t.Fatalf("gathering under max_bytes: %+v, want open, 3 deliveries, not started", g)
	}
	e = e.reopen(t)
	gs, _ = gatherStore(t, e)
	r := put("mb-4")
	if r.Gather != touba.GatherStarted || r.Carrier != carrier || !r.GatherWake.Equal(e.clock.Now()) {
		t.Fatalf("the delivery past max_bytes: %+v, want merged and the gathering started at once", r)
	}
	e.wantStatus(t, carrier, touba.StatusPending, "")
	if g := e.gathering(t, gs, carrier); g.State != touba.GatheringStarted || g.Size != 4 || g.StartedAt == nil ||
		!g.StartedAt.Equal(e.clock.Now()) || g.Bytes != 4*body {
		t.Fatalf("gathering past max_bytes: %+v, want started now with 4 deliveries", g)
	}
	e.wantGathered(t, gs, carrier, "mb-2", "mb-3", "mb-4")
	// The next delivery of the key opens the next gathering, its count
	// starting again from its own body.
	next := put("mb-5")
	if next.Gather != touba.GatherOpened || next.Carrier == carrier {
		t.Fatalf("after the start: %+v, want a new gathering", next)
	}
	e.clock.Add(time.Second)
	if r := put("mb-6"); r.Gather != touba.GatherMerged || r.Carrier != next.QueueID {
		t.Fatalf("second delivery of the new gathering: %+v, want merged (2,000 bytes, under max_bytes)", r)
	}
	e.wantGathered(t, gs, next.QueueID, "mb-6")
	// GatheredAt reads one merged entry with its body; EachGathered all,
	// in order.
	d, err := gs.GatheredAt(e.ctx, carrier, 3)
	if err != nil || d == nil || d.EventID != "mb-3" || len(d.Body) != body {
		t.Fatalf("GatheredAt 3: %+v, %v; want mb-3 with its body", d, err)
	}
	if d, err := gs.GatheredAt(e.ctx, carrier, 5); err != nil || d != nil {
		t.Fatalf("GatheredAt 5 of 4: %+v, %v; want none", d, err)
	}
	var seen []string
	if err := gs.EachGathered(e.ctx, carrier, func(d *touba.Delivery) error {
		if len(d.Body) != body {
			t.Fatalf("EachGathered %s: %d body bytes, want %d", d.EventID, len(d.Body), body)
		}
		seen = append(seen, d.EventID)
		return nil
	}); err != nil || strings.Join(seen, ",") != "mb-2,mb-3,mb-4" {
		t.Fatalf("EachGathered: %v, %v; want mb-2..mb-4", seen, err)
	}
}
