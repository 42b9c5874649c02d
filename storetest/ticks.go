package storetest

import (
	"context"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// tickQueue is what package schedule needs of a queue beyond
// touba.QueueStore: the newest tick of a schedule trigger, which
// --history never makes older.
type tickQueue interface {
	LatestTickID(ctx context.Context, triggerRef string) (string, error)
}

// runTicks: the newest tick of a schedule (SPEC §2.3), which it catches
// up from at start.
func runTicks(t *testing.T, f Factory) {
	t.Run("Latest", func(t *testing.T) { testTicksLatest(t, f) })
	t.Run("ForgottenByHistory", func(t *testing.T) { testTicksForgotten(t, f, nil) })
	// A schedule with "concurrency" (ticks never overlap) takes the keyed
	// path of Enqueue: its cursor moves all the same.
	t.Run("KeyedForgottenByHistory", func(t *testing.T) {
		testTicksForgotten(t, f, func(d *touba.Delivery) { d.ConcKey, d.ConcMax = `"trigger:t"`, 2 })
	})
}

// latestTick reads the newest tick of ref, skipping a queue without
// LatestTickID.
func (e *env) latestTick(t *testing.T, ref string) string {
	t.Helper()
	q, ok := e.Queue.(tickQueue)
	if !ok {
		t.Skip("the queue has no LatestTickID")
	}
	id, err := q.LatestTickID(e.ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// tick is the delivery intake makes of trigger:t's tick at id.
func tick(id string) *touba.Delivery {
	d := delivery(id, `{"scheduled_for":"`+id+`"}`)
	d.Headers, d.RemoteAddr, d.Tick = map[string]string{}, "", true
	return d
}

// The newest tick: the greatest event id of the trigger's entries that
// reads as a tick time (RFC 3339, UTC, whole seconds), of any state,
// whatever was enqueued last; other ids and other triggers do not count.
// Entries without a cursor are what the previous release wrote.
func testTicksLatest(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var ok bool
	latest := func(ref string) string { t.Helper(); return e.latestTick(t, ref) }
	if got := latest("trigger:t"); got != "" {
		t.Fatalf("latest tick of an empty queue = %q, want none", got)
	}
	for _, id := range []string{"2026-12-01T10:00:00Z", "2026-12-02T03:00:00Z", "2026-11-30T23:59:00Z", "zzzz", "2026-12-09"} {
		e.put(t, id, `{"scheduled_for":"`+id+`"}`)
	}
	other := tick("2027-01-01T00:00:00Z")
	other.TriggerRef = "trigger:other"
	e.enqueue(t, other)
	if got, want := latest("trigger:t"), "2026-12-02T03:00:00Z"; got != want {
		t.Fatalf("latest tick = %q, want %q", got, want)
	}
	if got := latest("trigger:none"); got != "" {
		t.Fatalf("latest tick of a trigger with no entry = %q, want none", got)
	}
	e = e.reopen(t)
	if _, ok = e.Queue.(tickQueue); !ok {
		t.Fatal("the reopened queue has no LatestTickID")
	}
	if got, want := latest("trigger:t"), "2026-12-02T03:00:00Z"; got != want {
		t.Fatalf("latest tick after a restart = %q, want %q", got, want)
	}
}

// A tick forgotten by --history after it ran is still the newest tick
// (issue 42): tick N-1 failed (kept), tick N ran and was forgotten; the
// schedule's cursor, moved by N's enqueue, outlives N's entry, so a
// restart does not take N-1 for the newest and enqueue N again. The
// cursor only moves forward: an older tick, or one enqueued again, leaves
// it where it is.
func testTicksForgotten(t *testing.T, f Factory, with func(*touba.Delivery)) {
	e := open(t, f, Options{})
	h := historyStore(t, e)
	if got := e.latestTick(t, "trigger:t"); got != "" {
		t.Fatalf("latest tick of an empty queue = %q, want none", got)
	}
	tick := func(id string) *touba.Delivery {
		d := tick(id)
		if with != nil {
			with(d)
		}
		return d
	}
	const prev, last = "2026-03-01T11:59:00Z", "2026-03-01T12:00:00Z"
	a, b := e.enqueue(t, tick(prev)), e.enqueue(t, tick(last))
	if !a.Created || !b.Created {
		t.Fatalf("ticks enqueued %+v, %+v, want two new entries", a, b)
	}
	e.lease(t, 2, a.QueueID, b.QueueID)
	e.finish(t, a.QueueID, touba.StatusFailed)
	e.finish(t, b.QueueID, touba.StatusDone)
	e.clock.Add(48 * time.Hour)
	if r := e.prune(t, h, e.clock.Now().Add(-24*time.Hour)); r.Entries != 1 {
		t.Fatalf("pass forgot %+v, want the done tick", r)
	}
	if d, err := e.Queue.Get(e.ctx, b.QueueID); err != nil || d != nil {
		t.Fatalf("tick %s: %+v (%v), want forgotten", last, d, err)
	}
	if got := e.get(t, a.QueueID); got.Status != touba.StatusFailed {
		t.Fatalf("tick %s: %s, want kept failed", prev, got.Status)
	}
	if got := e.latestTick(t, "trigger:t"); got != last {
		t.Fatalf("latest tick after --history forgot it = %q, want %q", got, last)
	}
	// Older ticks, a new one and one enqueued again, move nothing back.
	if r := e.enqueue(t, tick(prev)); r.Created || r.QueueID != a.QueueID {
		t.Fatalf("tick %s again: %+v, want its entry %s", prev, r, a.QueueID)
	}
	if r := e.enqueue(t, tick("2026-03-01T11:00:00Z")); !r.Created {
		t.Fatalf("older tick: %+v, want a new entry", r)
	}
	if got := e.latestTick(t, "trigger:t"); got != last {
		t.Fatalf("latest tick after older ones = %q, want %q", got, last)
	}
	if got := e.latestTick(t, "trigger:other"); got != "" {
		t.Fatalf("latest tick of another trigger = %q, want none", got)
	}
	e = e.reopen(t)
	if got := e.latestTick(t, "trigger:t"); got != last {
		t.Fatalf("latest tick after a restart = %q, want %q", got, last)
	}
	// A newer tick in the entries alone (as the previous release wrote
	// it, with no cursor) counts as well.
	e.put(t, "2026-03-03T12:01:00Z", `{}`)
	if got, want := e.latestTick(t, "trigger:t"), "2026-03-03T12:01:00Z"; got != want {
		t.Fatalf("latest tick with a newer entry = %q, want %q", got, want)
	}
}
