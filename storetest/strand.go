package storetest

import (
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// testParkStranded: what a reload strands (SPEC §2.3) is parked
// ProgramChanged, naming what changed: pending and waiting entries of a
// trigger the program lacks, waiting entries whose step it lacks or has as
// another kind. Their open waits close (no offer is consumed by them, no
// wake is due), their key lets the next entry go, and a waiting entry
// whose step is still there is left alone. In batches of limit.
func testParkStranded(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ss, ok := e.Queue.(touba.StrandStore)
	if !ok {
		t.Skip("the store does not park stranded entries")
	}
	ws := waitStore(t, e)
	later := e.clock.Now().Add(time.Hour)
	napper := e.keyedOf(t, "trigger:a", "nap", "k", "")
	e.lease(t, 10, napper)
	e.begin(t, ws, sleepFor(napper, "nap", later))
	behind := e.keyedOf(t, "trigger:a", "behind", "k", "") // held behind napper
	awaiter := e.waiter(t, "await", "")
	e.begin(t, ws, eventWait(awaiter, "await", keyA, `1`, &later))
	shaped := e.waiter(t, "shaped", "")
	e.begin(t, ws, sleepFor(shaped, "turned", later))
	gone1 := e.putOf(t, "trigger:gone", "g1", nil).QueueID
	gone2 := e.putOf(t, "trigger:gone", "g2", nil).QueueID

	shape := touba.ProgramShape{
		"trigger:a": {"await": touba.WaitEvent, "turned": touba.WaitEvent}, // nap removed, turned now a wait_for
		"trigger:b": {},
	}
	var parked []touba.Stranded
	for range 10 {
		got, err := ss.ParkStranded(e.ctx, shape, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 2 {
			t.Fatalf("%d parked in one call of limit 2", len(got))
		}
		parked = append(parked, got...)
		if len(got) < 2 {
			break
		}
	}
	var ids []string
	for _, s := range parked {
		ids = append(ids, s.QueueID)
		if s.Reason == "" {
			t.Fatalf("%s parked without a reason", s.QueueID)
		}
	}
	slices.Sort(ids)
	want := []string{gone1, gone2, napper, shaped}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("parked %v, want %v", ids, want)
	}
	for _, id := range want {
		e.wantStatus(t, id, touba.StatusParked, touba.EProgramChanged)
		if w, ok := e.waitOf(t, ws, id, "nap"); ok && w.State == touba.WaitOpen {
			t.Fatalf("open wait %+v left on parked %s", w, id)
		}
	}
	e.wantStatus(t, awaiter, touba.StatusWaiting, "")
	e.lease(t, 10, behind) // the key napper held is let go
	if got, err := ss.ParkStranded(e.ctx, shape, 2); err != nil || len(got) != 0 {
		t.Fatalf("a second pass parked %+v (%v), want none", got, err)
	}
	e.wantNextWake(t, ws, &later) // only the awaiter's timeout is due
}
