package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/fair"
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

func (e *env) wantHeldRuns(t *testing.T, fq touba.FairQueue, want map[string]int64) {
	t.Helper()
	got, err := fq.HeldRuns(e.ctx)
	if err != nil {
		t.Fatalf("held runs: %v", err)
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

// testPlannedAsks: one planned lease answers each ask with its trigger's
// oldest due entries, up to its N, and tells the plan what each took.
func testPlannedAsks(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	var a, b []string
	for i := range 3 {
		a = append(a, e.putOf(t, "trigger:a", fmt.Sprint("a", i), nil).QueueID)
		b = append(b, e.putOf(t, "trigger:b", fmt.Sprint("b", i), nil).QueueID)
	}
	c := e.putOf(t, "trigger:c", "c", nil).QueueID
	got := e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 2), ask("trigger:b", 5), ask("trigger:none", 3)},
		a[:2], b, nil)
	for _, ds := range got {
		for _, d := range ds {
			if d.Attempts != 1 {
				t.Fatalf("%s leased at attempt %d, want 1", d.QueueID, d.Attempts)
			}
			if s := e.get(t, d.QueueID); s.Status != touba.StatusRunning || s.Attempts != 1 || s.LeaseToken != d.LeaseToken {
				t.Fatalf("stored %s: %s at attempt %d under token %d, want running at 1 under %d",
					d.QueueID, s.Status, s.Attempts, s.LeaseToken, d.LeaseToken)
			}
		}
	}
	e.wantPending(t, 2) // a[2] and c
	for _, id := range []string{a[2], c} {
		if got := e.get(t, id); got.Status != touba.StatusPending || got.Attempts != 0 {
			t.Fatalf("%s not asked for: %s at attempt %d, want pending at 0", id, got.Status, got.Attempts)
		}
	}

	// Leased again, an entry spends its next attempt under a newer token.
	old := e.tok(a[0])
	if err := e.Queue.Retry(e.ctx, a[0], old, e.clock.Now(), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	got = e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 5)}, []string{a[0], a[2]})
	for _, d := range got[0] {
		if d.QueueID == a[0] && (d.Attempts != 2 || d.LeaseToken <= old) {
			t.Fatalf("%s leased again at attempt %d under token %d, want 2 under a token past %d", d.QueueID, d.Attempts, d.LeaseToken, old)
		}
	}
	// A script's asks go again after Reset, as a store redoing its
	// transaction needs.
	s := &script{asks: []touba.LeaseAsk{ask("trigger:c", 1)}, free: 1}
	s.Next()
	s.Reset()
	if next, ok := s.Next(); !ok || next.TriggerRef != "trigger:c" {
		t.Fatalf("script after Reset: %+v, %v", next, ok)
	}
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:c", 1), ask("trigger:a", 1)}, []string{c}, nil)
	e.wantPending(t, 0)
}

// testFairBacklog: the dispatcher's planner over a lease of 256 with 3,000
// entries of trigger:a waiting and 10 of trigger:b, all accepted later:
// trigger:b's 10 are leased in the same lease, trigger:a takes the rest.
func testFairBacklog(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	const backlog = 3000
	aIDs := make([]string, backlog)
	parallel(t, backlog, func(i int) error {
		d := delivery(fmt.Sprint("a", i), "a")
		d.TriggerRef = "trigger:a"
		r, err := e.Queue.Enqueue(e.ctx, d)
		aIDs[i] = r.QueueID
		return err
	})
	var bIDs []string
	for i := range 10 {
		bIDs = append(bIDs, e.putOf(t, "trigger:b", fmt.Sprint("b", i), nil).QueueID)
	}
	s := fair.New()
	round := s.Plan(256, nil, []fair.Candidate{{Ref: "trigger:a", Weight: 10, Limit: -1}, {Ref: "trigger:b", Weight: 10, Limit: -1}})
	got, err := fq.LeasePlanned(e.ctx, round)
	if err != nil {
		t.Fatal(err)
	}
	round.Done()
	by := map[string][]string{}
	for _, d := range got {
		if d.Status != touba.StatusRunning || d.Attempts != 1 {
			t.Fatalf("leased %s %s at attempt %d", d.QueueID, d.Status, d.Attempts)
		}
		by[d.TriggerRef] = append(by[d.TriggerRef], d.QueueID)
	}
	if len(got) != 256 || len(by["trigger:a"]) != 246 || len(by["trigger:b"]) != 10 {
		t.Fatalf("leased %d: %d of trigger:a, %d of trigger:b; want 256: 246 and 10 (asks %+v)",
			len(got), len(by["trigger:a"]), len(by["trigger:b"]), round.Taken())
	}
	slices.Sort(aIDs)
	if a := slices.Sorted(slices.Values(by["trigger:a"])); !slices.Equal(a, aIDs[:246]) {
		t.Fatal("trigger:a's leased entries are not its oldest 246")
	}
	if b := slices.Sorted(slices.Values(by["trigger:b"])); !slices.Equal(b, slices.Sorted(slices.Values(bIDs))) {
		t.Fatalf("trigger:b leased %v, want %v", b, bIDs)
	}
	taken := 0
	for _, a := range round.Taken() {
		taken += a.N
	}
	if taken != len(got) {
		t.Fatalf("the round was told of %d taken (%+v), the lease returned %d", taken, round.Taken(), len(got))
	}
	if !s.Backlogged("trigger:a") || s.Backlogged("trigger:b") {
		t.Fatalf("backlogged: trigger:a %v, trigger:b %v; want true, false", s.Backlogged("trigger:a"), s.Backlogged("trigger:b"))
	}
	e.wantPending(t, backlog-246)
}

// testTriggerAskSkips: a trigger's ask leaves entries not yet due, of a
// paused trigger, held behind their key, or handed back on a binding.
func testTriggerAskSkips(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	retried := e.putOf(t, "trigger:a", "retried", nil).QueueID
	handed := e.putOf(t, "trigger:a", "handed", nil).QueueID
	k1 := e.keyedOf(t, "trigger:a", "k1", "k", "")
	k2 := e.keyedOf(t, "trigger:a", "k2", "k", "")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{retried, handed, k1})
	if err := e.Queue.Retry(e.ctx, retried, e.tok(retried), e.clock.Now().Add(time.Hour), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	e.handBack(t, fq, handed, "tool:x", touba.EBindingBusy)
	due := e.putOf(t, "trigger:a", "due", nil).QueueID
	e.pause(t, "trigger:p")
	p := e.putOf(t, "trigger:p", "p", nil).QueueID

	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), ask("trigger:p", 10)}, []string{due}, nil)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), ask("trigger:p", 10)}, nil, nil)
	if got := e.get(t, p); got.Attempts != 0 || got.Status != touba.StatusPending {
		t.Fatalf("paused entry: %s at attempt %d, want pending at 0", got.Status, got.Attempts)
	}
	// Each hold ends on its own.
	e.clock.Add(time.Hour)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{retried})
	e.resume(t, "trigger:p")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:p", 10)}, []string{p})
	e.finish(t, k1, touba.StatusDone)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{k2})
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10), ask("trigger:a", 10)}, []string{handed}, nil)
	e.wantPending(t, 0)
}

// testHoldRun: a run handed back is pending with its attempt given back,
// counted by its hold and as held on its binding; only an ask of its hold
// leases it, and then it is an entry like any other.
func testHoldRun(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	holds(t, e)
	a := e.putOf(t, "trigger:a", "a", nil).QueueID
	b := e.putOf(t, "trigger:b", "b", nil).QueueID
	c := e.putOf(t, "trigger:a", "c", nil).QueueID
	got := e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 1), ask("trigger:b", 1)}, []string{a}, []string{b})
	tokA := got[0][0].LeaseToken
	e.wantPending(t, 1)
	if err := fq.HoldRun(e.ctx, a, tokA, "tool:x", touba.EBindingBusy, "no free slot"); err != nil {
		t.Fatal(err)
	}
	e.handBack(t, fq, b, "tool:y", touba.ECircuitOpen)
	e.wantPending(t, 3)
	if got := e.get(t, a); got.Status != touba.StatusPending || got.Attempts != 0 || got.ErrorCode != touba.EBindingBusy {
		t.Fatalf("handed back: %s at attempt %d (%s), want pending at 0 (%s)", got.Status, got.Attempts, got.ErrorCode, touba.EBindingBusy)
	}
	if d, err := e.Queue.Detail(e.ctx, a); err != nil || d == nil || d.ErrorMessage != "no free slot" || d.NotBefore != nil {
		t.Fatalf("detail of the handed back entry: %+v, %v; want its message, due at once", d, err)
	}
	e.wantHeldRuns(t, fq, map[string]int64{"tool:x": 1, "tool:y": 1})
	e.wantCounts(t, "trigger:a", map[string]int64{touba.StatusPending: 2, touba.HeldSlot: 1})
	e.wantCounts(t, "trigger:b", map[string]int64{touba.StatusPending: 1, touba.HeldCircuit: 1})
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), ask("trigger:b", 10)}, []string{c}, nil)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), ask("trigger:b", 10), holdAsk("tool:none", 10)}, nil, nil, nil)

	// The hold's ask leases it, at the attempt its first lease counted.
	got = e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, []string{a})
	if d := got[0][0]; d.Attempts != 1 || d.LeaseToken <= tokA {
		t.Fatalf("leased by its hold at attempt %d under token %d, want 1 under a token past %d", d.Attempts, d.LeaseToken, tokA)
	}
	e.wantHeldRuns(t, fq, map[string]int64{"tool:y": 1})
	e.wantCounts(t, "trigger:a", map[string]int64{touba.StatusRunning: 2})
	e.wantPending(t, 1)

	// No longer held: retried, its trigger's ask leases it; handed back
	// again, only its (new) hold's.
	if err := e.Queue.Retry(e.ctx, a, e.tok(a), e.clock.Now(), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, "trigger:a", map[string]int64{touba.StatusRunning: 1, touba.StatusPending: 1})
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, nil)
	if got := e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{a}); got[0][0].Attempts != 2 {
		t.Fatalf("retried entry leased at attempt %d, want 2", got[0][0].Attempts)
	}
	e.handBack(t, fq, a, "tool:z", touba.EBindingBusy)
	if got := e.get(t, a); got.Attempts != 1 {
		t.Fatalf("handed back again at attempt %d, want 1", got.Attempts)
	}
	e.wantHeldRuns(t, fq, map[string]int64{"tool:y": 1, "tool:z": 1})
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), holdAsk("tool:x", 10)}, nil, nil)
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:z", 10), holdAsk("tool:y", 10)}, []string{a}, []string{b})
	e.wantHeldRuns(t, fq, map[string]int64{})
	e.finish(t, a, touba.StatusDone)
	e.finish(t, b, touba.StatusDone)
	e.wantCounts(t, "trigger:b", nil)
}

// testHoldAskOrder: a hold's ask takes the oldest entries handed back on
// it, whatever their trigger, and none handed back on another hold.
func testHoldAskOrder(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	x1 := e.putOf(t, "trigger:b", "x1", nil).QueueID
	y := e.putOf(t, "trigger:a", "y", nil).QueueID
	x2 := e.putOf(t, "trigger:a", "x2", nil).QueueID
	x3 := e.putOf(t, "trigger:b", "x3", nil).QueueID
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), ask("trigger:b", 10)}, []string{y, x2}, []string{x1, x3})
	// Handed back in another order than accepted: the queue's order holds.
	for _, id := range []string{x3, x2, y, x1} {
		hold := "tool:x"
		if id == y {
			hold = "tool:y"
		}
		e.handBack(t, fq, id, hold, touba.EBindingBusy)
	}
	e.wantHeldRuns(t, fq, map[string]int64{"tool:x": 3, "tool:y": 1})
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 2)}, []string{x1, x2})
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10), holdAsk("tool:x", 10)}, []string{x3}, nil)
	e.wantHeldRuns(t, fq, map[string]int64{"tool:y": 1})
}

// testHoldRunLeaseLost: HoldRun under a token the entry is no longer
// leased under is refused (LeaseLost) and changes nothing.
func testHoldRunLeaseLost(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	a := e.putOf(t, "trigger:a", "a", nil).QueueID
	stale := e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 1)}, []string{a})[0][0].LeaseToken
	if err := e.Queue.Retry(e.ctx, a, stale, e.clock.Now(), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	cur := e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 1)}, []string{a})[0][0].LeaseToken
	err := fq.HoldRun(e.ctx, a, stale, "tool:x", touba.EBindingBusy, "busy")
	if touba.ErrorCode(err) != touba.ELeaseLost {
		t.Fatalf("hold run under a stale token: %v, want %s", err, touba.ELeaseLost)
	}
	if got := e.get(t, a); got.Status != touba.StatusRunning || got.LeaseToken != cur || got.Attempts != 2 || got.ErrorCode != touba.EHandlerFailed {
		t.Fatalf("after a refused hold run: %s at attempt %d under token %d (%s), want running at 2 under %d (%s)",
			got.Status, got.Attempts, got.LeaseToken, got.ErrorCode, cur, touba.EHandlerFailed)
	}
	e.wantHeldRuns(t, fq, map[string]int64{})
	e.wantPending(t, 0)
	// Nor is a pending entry handed back, nor one on no hold.
	b := e.putOf(t, "trigger:a", "b", nil).QueueID
	if err := fq.HoldRun(e.ctx, b, e.tok(b), "tool:x", touba.EBindingBusy, "busy"); err == nil {
		t.Fatal("hold run of a pending entry accepted")
	}
	if err := fq.HoldRun(e.ctx, a, cur, "", touba.EBindingBusy, "busy"); err == nil {
		t.Fatal("hold run on no hold accepted")
	}
	e.wantHeldRuns(t, fq, map[string]int64{})
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{b})
	e.handBack(t, fq, a, "tool:x", touba.EBindingBusy)
	e.wantHeldRuns(t, fq, map[string]int64{"tool:x": 1})
}

// testHoldAskSkipsPaused: a hold's ask leaves the entries of a paused
// trigger, handed back on it, until the trigger resumes.
func testHoldAskSkipsPaused(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	holds(t, e)
	p := e.putOf(t, "trigger:p", "p", nil).QueueID
	a := e.putOf(t, "trigger:a", "a", nil).QueueID
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:p", 1), ask("trigger:a", 1)}, []string{p}, []string{a})
	e.handBack(t, fq, p, "tool:x", touba.EBindingBusy)
	e.handBack(t, fq, a, "tool:x", touba.EBindingBusy)
	e.pause(t, "trigger:p")
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, []string{a})
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, nil)
	e.wantHeldRuns(t, fq, map[string]int64{"tool:x": 1})
	if got := e.get(t, p); got.Status != touba.StatusPending || got.Attempts != 0 {
		t.Fatalf("paused, handed back: %s at attempt %d, want pending at 0", got.Status, got.Attempts)
	}
	e.resume(t, "trigger:p")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:p", 10)}, nil)
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, []string{p})
}

// testHeldKeepsKey: a keyed run handed back keeps its key: the next entry
// of the key waits until it ends, not until it is handed back.
func testHeldKeepsKey(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	k1 := e.keyedOf(t, "trigger:a", "k1", "k", "")
	k2 := e.keyedOf(t, "trigger:a", "k2", "k", "")
	other := e.keyedOf(t, "trigger:a", "other", "j", "")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{k1, other})
	e.handBack(t, fq, k1, "tool:x", touba.EBindingBusy)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, nil)
	if got := e.get(t, k2); got.Status != touba.StatusPending || !got.Held {
		t.Fatalf("k2 while k1 is handed back: %s, held %v; want pending, held", got.Status, got.Held)
	}
	e.wantCounts(t, "trigger:a", map[string]int64{touba.StatusPending: 2, touba.StatusRunning: 1, "held": 1, touba.HeldSlot: 1})
	e.wantReady(t, fq)
	// Ending another key's run releases nothing of this key.
	e.finish(t, other, touba.StatusDone)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, nil)
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, []string{k1})
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, nil)
	e.wantCounts(t, "trigger:a", map[string]int64{touba.StatusPending: 1, touba.StatusRunning: 1, "held": 1})
	e.finish(t, k1, touba.StatusDone)
	e.wantReady(t, fq, "trigger:a")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{k2})
}

// testHeldKeepsKeyAtReplay: an earlier entry of the key replayed while a
// later one is handed back waits behind it, as it would behind it running
// (rehold): the key's max holds once the hold's ask leases the later one.
func testHeldKeepsKeyAtReplay(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	k0 := e.keyedOf(t, "trigger:a", "k0", "k", "")
	k1 := e.keyedOf(t, "trigger:a", "k1", "k", "")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{k0})
	e.finish(t, k0, touba.StatusFailed)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{k1})
	e.handBack(t, fq, k1, "tool:x", touba.EBindingBusy)
	if res, err := e.Queue.Replay(e.ctx, []string{k0}, touba.ReplayOptions{}); err != nil || len(res) != 1 || res[0].From != touba.StatusFailed {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	running := map[string]bool{}
	for _, d := range e.leasePlan(t, fq, ask("trigger:a", 10))[0] {
		running[d.QueueID] = true
	}
	for _, d := range e.leasePlan(t, fq, holdAsk("tool:x", 10))[0] {
		running[d.QueueID] = true
	}
	if len(running) > 1 {
		t.Fatalf("key of max 1 runs %v at once: the replayed k0 did not wait behind the handed back k1", running)
	}
	if !running[k1] {
		t.Fatalf("running %v, want the handed back %s", running, k1)
	}
	e.finish(t, k1, touba.StatusDone)
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{k0})
}

// testHoldRunCancel: a run asked to cancel (cancel_on) that is handed back
// ends cancelled, its key released.
func testHoldRunCancel(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	fq := fairQueue(t, e)
	k1 := e.keyedOf(t, "trigger:a", "k1", "k", "1")
	k2 := e.keyedOf(t, "trigger:a", "k2", "k", "")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{k1})
	b := e.cancelling(t, "b", "1")
	if req, err := ws.CancelRequested(e.ctx, k1); err != nil || !req {
		t.Fatalf("cancel requested of k1: %v, %v", req, err)
	}
	e.wantStatus(t, k1, touba.StatusRunning, "")
	e.wantPending(t, 2)
	if err := fq.HoldRun(e.ctx, k1, e.tok(k1), "tool:x", touba.EBindingBusy, "busy"); err != nil {
		t.Fatalf("hold run of an entry asked to cancel: %v", err)
	}
	e.wantStatus(t, k1, touba.StatusCancelled, touba.ERunCancelled)
	e.wantPending(t, 2)
	e.wantHeldRuns(t, fq, map[string]int64{})
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10), ask("trigger:a", 10), ask("trigger:b", 10)}, nil, []string{k2}, []string{b})
}

// testHoldDurable: a run handed back stays held across a restart, and
// another node on the same storage sees it held and leases it by its hold.
func testHoldDurable(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	a := e.putOf(t, "trigger:a", "a", nil).QueueID
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{a})
	e.handBack(t, fq, a, "tool:x", touba.EBindingBusy)
	b := e.putOf(t, "trigger:a", "b", nil).QueueID

	e = e.reopen(t)
	fq = fairQueue(t, e)
	e.wantHeldRuns(t, fq, map[string]int64{"tool:x": 1})
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10)}, []string{b})
	e.wantReady(t, fq)
	other := e.again(t)
	ofq := fairQueue(t, other)
	other.wantHeldRuns(t, ofq, map[string]int64{"tool:x": 1})
	other.planned(t, ofq, []touba.LeaseAsk{ask("trigger:a", 10)}, nil)
	got := other.planned(t, ofq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, []string{a})
	if got[0][0].Attempts != 1 {
		t.Fatalf("leased by another node at attempt %d, want 1", got[0][0].Attempts)
	}
	e.wantHeldRuns(t, fq, map[string]int64{})
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10)}, nil)
	other.finish(t, a, touba.StatusDone)
	e.wantStatus(t, a, touba.StatusDone, "")
}

// testReadyTriggers: the triggers with entries no key or binding holds
// back, due or not, each once, by ref.
func testReadyTriggers(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	e.wantReady(t, fq)
	for _, ref := range []string{"trigger:m", "trigger:B", "trigger:a"} {
		e.putOf(t, ref, "1", nil)
		e.putOf(t, ref, "2", nil)
	}
	later := e.putOf(t, "trigger:later", "1", nil).QueueID
	handed := e.putOf(t, "trigger:handed", "1", nil).QueueID
	run := e.putOf(t, "trigger:run", "1", nil).QueueID
	k1 := e.keyedOf(t, "trigger:key", "k1", "k", "")
	e.keyedOf(t, "trigger:key", "k2", "k", "")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:later", 1), ask("trigger:handed", 1), ask("trigger:run", 1), ask("trigger:key", 10)},
		[]string{later}, []string{handed}, []string{run}, []string{k1})
	if err := e.Queue.Retry(e.ctx, later, e.tok(later), e.clock.Now().Add(time.Hour), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	e.handBack(t, fq, handed, "tool:x", touba.EBindingBusy)
	got, err := fq.ReadyTriggers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"trigger:B", "trigger:a", "trigger:later", "trigger:m"}
	if !slices.Equal(got, want) {
		t.Fatalf("ready triggers %q, want %q (sorted by bytes, each once)", got, want)
	}
	e.finish(t, k1, touba.StatusDone)
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 1)}, []string{handed})
	if err := e.Queue.Retry(e.ctx, handed, e.tok(handed), e.clock.Now(), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	e.wantReady(t, fq, "trigger:B", "trigger:a", "trigger:handed", "trigger:key", "trigger:later", "trigger:m")

	// The contract (touba.FairQueue) names a pause too; report what the
	// store does with a paused trigger's entries without failing on it.
	if _, ok := e.Queue.(touba.HoldStore); ok {
		e.pause(t, "trigger:m")
		got, err := fq.ReadyTriggers(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(got, "trigger:m") {
			t.Logf("note: ReadyTriggers lists the paused trigger:m (%s)", strings.Join(got, ", "))
		}
	}
}

// testReplayClearsHold: an entry cancelled (cancel_on) while handed back
// is replayed as an entry like any other: its hold is gone, its key held
// as any replayed entry's.
func testReplayClearsHold(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	waitStore(t, e)
	fq := fairQueue(t, e)
	a := e.putOf(t, "trigger:a", "a", func(d *touba.Delivery) {
		d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: "1"}}
	}).QueueID
	k1 := e.keyedOf(t, "trigger:k", "k1", "k", "2")
	k2 := e.keyedOf(t, "trigger:k", "k2", "k", "")
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), ask("trigger:k", 10)}, []string{a}, []string{k1})
	e.handBack(t, fq, a, "tool:x", touba.EBindingBusy)
	e.handBack(t, fq, k1, "tool:x", touba.ECircuitOpen)
	e.wantHeldRuns(t, fq, map[string]int64{"tool:x": 2})
	b1 := e.cancelling(t, "b1", "1")
	b2 := e.cancelling(t, "b2", "2")
	e.wantStatus(t, a, touba.StatusCancelled, touba.ERunCancelled)
	e.wantStatus(t, k1, touba.StatusCancelled, touba.ERunCancelled)
	e.wantHeldRuns(t, fq, map[string]int64{})
	// The cancelled k1 left its key: k2 goes.
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10), ask("trigger:k", 10), ask("trigger:b", 10)}, nil, []string{k2}, []string{b1, b2})

	res, err := e.Queue.Replay(e.ctx, []string{a, k1}, touba.ReplayOptions{})
	if err != nil || len(res) != 2 || res[0].From != touba.StatusCancelled || res[1].From != touba.StatusCancelled {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	e.wantHeldRuns(t, fq, map[string]int64{})
	e.wantCounts(t, "trigger:a", map[string]int64{touba.StatusPending: 1})
	e.wantCounts(t, "trigger:k", map[string]int64{touba.StatusPending: 1, touba.StatusRunning: 1, "held": 1})
	// a goes by its trigger's ask; k1 waits behind the running k2, then
	// goes by its trigger's ask too.
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10), ask("trigger:a", 10), ask("trigger:k", 10)}, nil, []string{a}, nil)
	e.finish(t, k2, touba.StatusDone)
	e.planned(t, fq, []touba.LeaseAsk{holdAsk("tool:x", 10), ask("trigger:k", 10)}, nil, []string{k1})
}

// testByKey (SPEC §2.1 dispatch: within one trigger, among the values of
// its concurrency key in turn): key "big" has 6 runnable entries (max 10),
// then "small" 2; an ask of 4 ByKey takes big's oldest 2 and small's 2,
// where an ask oldest first would take big's 4. Within a value the order
// stays acceptance's.
func testByKey(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	put := func(id, key string) string {
		return e.putOf(t, "trigger:k", id, func(d *touba.Delivery) { d.ConcKey, d.ConcMax = `"`+key+`"`, 10 }).QueueID
	}
	var big, small []string
	for i := range 6 {
		big = append(big, put(fmt.Sprintf("big-%d", i), "big"))
	}
	for i := range 2 {
		small = append(small, put(fmt.Sprintf("small-%d", i), "small"))
	}
	a := touba.LeaseAsk{TriggerRef: "trigger:k", N: 4, ByKey: true}
	e.planned(t, fq, []touba.LeaseAsk{a}, []string{big[0], big[1], small[0], small[1]})
	// The rest of big, oldest first.
	e.planned(t, fq, []touba.LeaseAsk{a}, []string{big[2], big[3], big[4], big[5]})
}
