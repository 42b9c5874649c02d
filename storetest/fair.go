package storetest

import (
	"fmt"
	"slices"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// Fair dispatch (touba.FairQueue, SPEC §2.1 dispatch, §2.2 "Holds take
// nothing"): a planned lease answers each ask of its plan in one
// transaction, a trigger's ask taking only its due entries that no key,
// pause or binding holds back; a run handed back on a binding (HoldRun)
// waits pending, its attempt given back, in no trigger's ask, until an ask
// names its hold. Unlike the rest of the suite, one test imports package
// fair (no I/O, no backend): the dispatcher's own planner over a backlog.
func runFair(t *testing.T, f Factory) {
	t.Run("PlannedAsks", func(t *testing.T) { testPlannedAsks(t, f) })
	t.Run("BacklogDoesNotStarve", func(t *testing.T) { testFairBacklog(t, f) })
	t.Run("TriggerAskSkipsHeld", func(t *testing.T) { testTriggerAskSkips(t, f) })
	t.Run("HoldRun", func(t *testing.T) { testHoldRun(t, f) })
	t.Run("HoldAskOldestOfAnyTrigger", func(t *testing.T) { testHoldAskOrder(t, f) })
	t.Run("HoldRunLeaseLost", func(t *testing.T) { testHoldRunLeaseLost(t, f) })
	t.Run("HoldAskSkipsPaused", func(t *testing.T) { testHoldAskSkipsPaused(t, f) })
	t.Run("HoldAskOfOneTrigger", func(t *testing.T) { testHoldAskOfOneTrigger(t, f) })
	t.Run("HeldRunKeepsItsKey", func(t *testing.T) { testHeldKeepsKey(t, f) })
	t.Run("HeldRunKeepsItsKeyAtReplay", func(t *testing.T) { testHeldKeepsKeyAtReplay(t, f) })
	t.Run("HoldRunCancelRequested", func(t *testing.T) { testHoldRunCancel(t, f) })
	t.Run("HoldDurable", func(t *testing.T) { testHoldDurable(t, f) })
	t.Run("ReadyTriggers", func(t *testing.T) { testReadyTriggers(t, f) })
	t.Run("ReplayClearsHold", func(t *testing.T) { testReplayClearsHold(t, f) })
	t.Run("ByKeyTakesValuesInTurn", func(t *testing.T) { testByKey(t, f) })
}

func fairQueue(t *testing.T, e *env) touba.FairQueue {
	t.Helper()
	fq, ok := e.Queue.(touba.FairQueue)
	if !ok {
		t.Skip("the queue store plans no leases (touba.FairQueue)")
	}
	return fq
}

// script is a LeasePlan that asks a fixed list of asks, whatever they take,
// and records what the store told it.
type script struct {
	asks []touba.LeaseAsk
	free int

	next     int
	resets   int
	took     []int // what each ask leased, in order
	takeOver int   // entries the store took over on its own
	bad      string
}

var _ touba.LeasePlan = (*script)(nil)

func (s *script) Reset() { s.next, s.took, s.takeOver, s.bad = 0, s.took[:0], 0, ""; s.resets++ }

func (s *script) Next() (touba.LeaseAsk, bool) {
	if s.next >= len(s.asks) {
		return touba.LeaseAsk{}, false
	}
	s.next++
	return s.asks[s.next-1], true
}

func (s *script) Took(a touba.LeaseAsk, n int) {
	switch {
	case a.Hold == touba.HoldTakeOver:
		s.takeOver += n
	case len(s.took) >= s.next || a != s.asks[len(s.took)]:
		s.bad = fmt.Sprintf("Took(%+v, %d): not the ask answered next (asks %+v, %d answered)", a, n, s.asks, len(s.took))
	case n < 0 || n > a.N:
		s.bad = fmt.Sprintf("Took(%+v, %d): more than asked", a, n)
	default:
		s.took = append(s.took, n)
	}
}

func (s *script) Free() int { return s.free }

func ask(ref string, n int) touba.LeaseAsk      { return touba.LeaseAsk{TriggerRef: ref, N: n} }
func holdAsk(hold string, n int) touba.LeaseAsk { return touba.LeaseAsk{Hold: hold, N: n} }

// heldAsk asks for ref's runs handed back on hold.
func heldAsk(hold, ref string, n int) touba.LeaseAsk {
	return touba.LeaseAsk{Hold: hold, TriggerRef: ref, N: n}
}

// leasePlan leases through a script of asks and returns what each ask
// leased, checking what every planned lease must be: Took told of each
// ask, once, in order, with the number it leased; the entries in the
// order of the asks, running, each of its ask's trigger.
func (e *env) leasePlan(t *testing.T, fq touba.FairQueue, asks ...touba.LeaseAsk) [][]*touba.Delivery {
	t.Helper()
	s := &script{asks: asks, free: 256}
	got, err := fq.LeasePlanned(e.ctx, s)
	if err != nil {
		t.Fatalf("lease planned %+v: %v", asks, err)
	}
	if s.bad != "" {
		t.Fatal(s.bad)
	}
	if s.takeOver != 0 {
		t.Fatalf("the store took over %d expired leases; none expired", s.takeOver)
	}
	if len(s.took) != len(asks) {
		t.Fatalf("Took told of %d asks (%v), want the %d asked", len(s.took), s.took, len(asks))
	}
	out := make([][]*touba.Delivery, len(asks))
	rest := got
	for i, n := range s.took {
		if n > len(rest) {
			t.Fatalf("Took says %v, the lease returned %d entries", s.took, len(got))
		}
		out[i], rest = rest[:n], rest[n:]
		for _, d := range out[i] {
			if d.Status != touba.StatusRunning || d.LeaseToken == 0 {
				t.Fatalf("ask %+v leased %s %s under token %d, want running under a token", asks[i], d.QueueID, d.Status, d.LeaseToken)
			}
			if asks[i].TriggerRef != "" && d.TriggerRef != asks[i].TriggerRef {
				t.Fatalf("ask %+v leased %s of %s", asks[i], d.QueueID, d.TriggerRef)
			}
		}
	}
	if len(rest) != 0 {
		t.Fatalf("Took says %v, the lease returned %d entries", s.took, len(got))
	}
	return out
}

// planned leases through asks and checks that each ask leased exactly the
// entries of its want (in any order: an ask takes its oldest n).
func (e *env) planned(t *testing.T, fq touba.FairQueue, asks []touba.LeaseAsk, want ...[]string) [][]*touba.Delivery {
	t.Helper()
	got := e.leasePlan(t, fq, asks...)
	for i := range asks {
		var w []string
		if i < len(want) {
			w = slices.Sorted(slices.Values(want[i]))
		}
		ids := slices.Sorted(slices.Values(idsOf(got[i])))
		if !slices.Equal(ids, w) {
			t.Fatalf("ask %+v leased %v, want %v", asks[i], ids, w)
		}
	}
	return got
}

// handBack hands the running entry id back on hold.
func (e *env) handBack(t *testing.T, fq touba.FairQueue, id, hold, code string) {
	t.Helper()
	if err := fq.HoldRun(e.ctx, id, e.tok(id), hold, code, "held on "+hold); err != nil {
		t.Fatalf("hold run %s on %s: %v", id, hold, err)
	}
}

// wantHeldRuns checks HeldRuns, summed over the triggers of each hold.
func (e *env) wantHeldRuns(t *testing.T, fq touba.FairQueue, want map[string]int64) {
	t.Helper()
	by, err := fq.HeldRuns(e.ctx)
	if err != nil {
		t.Fatalf("held runs: %v", err)
	}
	got := map[string]int64{}
	for hold, refs := range by {
		for _, n := range refs {
			got[hold] += n
		}
	}
	if len(got) != len(want) {
		t.Fatalf("held runs %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("held runs %v, want %v", got, want)
		}
	}
}

func (e *env) wantReady(t *testing.T, fq touba.FairQueue, want ...string) {
	t.Helper()
	got, err := fq.ReadyTriggers(e.ctx)
	if err != nil {
		t.Fatalf("ready triggers: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ready triggers %q, want %q", got, want)
	}
}

// counts is one trigger's CountByTrigger, with no other key than want's.
func (e *env) wantCounts(t *testing.T, ref string, want map[string]int64) {
	t.Helper()
	h := holds(t, e)
	all, err := h.CountByTrigger(e.ctx)
	if err != nil {
		t.Fatalf("count by trigger: %v", err)
	}
	got := all[ref]
	for k, n := range got {
		if want[k] != n {
			t.Fatalf("counts of %s %v, want %v", ref, got, want)
		}
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("counts of %s %v, want %v", ref, got, want)
		}
	}
}

// keyedOf is a new entry of ref under concurrency key key (max 1),
// cancelled by cancel_on value cancelValue when that is set.
func (e *env) keyedOf(t *testing.T, ref, eventID, key, cancelValue string) string {
	t.Helper()
	return e.putOf(t, ref, eventID, func(d *touba.Delivery) {
		d.ConcKey, d.ConcMax = `"`+key+`"`, 1
		if cancelValue != "" {
			d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: cancelValue}}
		}
	}).QueueID
}

func (e *env) pause(t *testing.T, ref string) {
	t.Helper()
	if changed, err := holds(t, e).PauseTrigger(e.ctx, touba.TriggerPause{TriggerRef: ref, At: e.clock.Now(), Operator: "op"}); err != nil || !changed {
		t.Fatalf("pause %s: %v, %v", ref, changed, err)
	}
}

func (e *env) resume(t *testing.T, ref string) {
	t.Helper()
	if changed, err := holds(t, e).ResumeTrigger(e.ctx, ref); err != nil || !changed {
		t.Fatalf("resume %s: %v, %v", ref, changed, err)
	}
}

// cancelling enqueues a delivery of trigger:b cancelling the entries of
// cancel value value.
func (e *env) cancelling(t *testing.T, eventID, value string) string {
	t.Helper()
	return e.putOf(t, "trigger:b", eventID, func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: value}}
	}).QueueID
}
