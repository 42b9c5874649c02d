package storetest

import (
	"context"
	"testing"
)

// tickQueue is what package schedule needs of a queue beyond
// touba.QueueStore: the newest tick of a schedule trigger.
type tickQueue interface {
	LatestTickID(ctx context.Context, triggerRef string) (string, error)
}

// The newest tick (SPEC §2.3): the greatest event id of the trigger's
// entries that reads as a tick time (RFC 3339, UTC, whole seconds), of
// any state, whatever was enqueued last; other ids and other triggers do
// not count.
func runTicks(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	q, ok := e.Queue.(tickQueue)
	if !ok {
		t.Skip("the queue has no LatestTickID")
	}
	latest := func(ref string) string {
		t.Helper()
		id, err := q.LatestTickID(e.ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if got := latest("trigger:t"); got != "" {
		t.Fatalf("latest tick of an empty queue = %q, want none", got)
	}
	for _, id := range []string{"2026-12-01T10:00:00Z", "2026-12-02T03:00:00Z", "2026-11-30T23:59:00Z", "zzzz", "2026-12-09"} {
		e.put(t, id, `{"scheduled_for":"`+id+`"}`)
	}
	other := delivery("2027-01-01T00:00:00Z", `{}`)
	other.TriggerRef = "trigger:other"
	e.enqueue(t, other)
	if got, want := latest("trigger:t"), "2026-12-02T03:00:00Z"; got != want {
		t.Fatalf("latest tick = %q, want %q", got, want)
	}
	if got := latest("trigger:none"); got != "" {
		t.Fatalf("latest tick of a trigger with no entry = %q, want none", got)
	}
	e = e.reopen(t)
	if q, ok = e.Queue.(tickQueue); !ok {
		t.Fatal("the reopened queue has no LatestTickID")
	}
	if got, want := latest("trigger:t"), "2026-12-02T03:00:00Z"; got != want {
		t.Fatalf("latest tick after a restart = %q, want %q", got, want)
	}
}
