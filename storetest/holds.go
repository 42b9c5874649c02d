package storetest

import (
	"testing"

	touba "github.com/touba/touba-trigger"
)

// Paused triggers (touba.HoldStore, SPEC §6): the lease skips a paused
// trigger's entries, which stay pending with no attempt spent; the pause
// survives a restart and holds for another node on the same storage.
func runHolds(t *testing.T, f Factory) {
	t.Run("LeaseSkipsPaused", func(t *testing.T) { testLeaseSkipsPaused(t, f) })
}

func holds(t *testing.T, e *env) touba.HoldStore {
	t.Helper()
	h, ok := e.Queue.(touba.HoldStore)
	if !ok {
		t.Skip("the queue store keeps no paused triggers")
	}
	return h
}

func testLeaseSkipsPaused(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	h := holds(t, e)
	if changed, err := h.PauseTrigger(e.ctx, touba.TriggerPause{TriggerRef: "trigger:p", At: e.clock.Now(), Operator: "op", Reason: "why"}); err != nil || !changed {
		t.Fatalf("pause: %v, %v", changed, err)
	}
	if changed, err := h.PauseTrigger(e.ctx, touba.TriggerPause{TriggerRef: "trigger:p", At: e.clock.Now(), Operator: "op2"}); err != nil || changed {
		t.Fatalf("second pause: changed %v, %v; want unchanged", changed, err)
	}
	put := func(ref, id string) string {
		d := delivery(id, id)
		d.TriggerRef = ref
		r := e.enqueue(t, d)
		if !r.Created {
			t.Fatalf("enqueue %s: %+v", id, r)
		}
		return r.QueueID
	}
	p1 := put("trigger:p", "p1")
	free := put("trigger:t", "t1")
	p2 := put("trigger:p", "p2")
	e.lease(t, 10, free)
	e.lease(t, 10)

	// A restart, and another node on the same storage, see the pause.
	e = e.reopen(t)
	h = holds(t, e)
	other := e.again(t)
	e.lease(t, 10)
	other.lease(t, 10)
	ps, err := h.PausedTriggers(e.ctx)
	if err != nil || len(ps) != 1 || ps[0].TriggerRef != "trigger:p" || ps[0].Operator != "op" || ps[0].Reason != "why" {
		t.Fatalf("paused triggers: %+v, %v", ps, err)
	}
	counts, err := h.CountByTrigger(e.ctx)
	if err != nil || counts["trigger:p"][touba.StatusPending] != 2 || counts["trigger:t"][touba.StatusRunning] != 1 {
		t.Fatalf("counts: %v, %v", counts, err)
	}
	for _, q := range []string{p1, p2} {
		if got := e.get(t, q); got.Status != touba.StatusPending || got.Attempts != 0 {
			t.Fatalf("paused entry %s: %s at attempt %d, want pending at 0", q, got.Status, got.Attempts)
		}
	}

	if changed, err := holds(t, other).ResumeTrigger(e.ctx, "trigger:p"); err != nil || !changed {
		t.Fatalf("resume: %v, %v", changed, err)
	}
	if changed, err := h.ResumeTrigger(e.ctx, "trigger:p"); err != nil || changed {
		t.Fatalf("second resume: changed %v, %v; want unchanged", changed, err)
	}
	e.lease(t, 10, p1, p2)
}
