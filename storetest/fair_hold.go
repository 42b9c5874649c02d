package storetest

import (
	"testing"

	touba "github.com/touba/touba-trigger"
)

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

// testHoldAskOfOneTrigger: HeldRuns counts the runs handed back by hold
// and trigger (a paused trigger's too), and a hold's ask that names a
// trigger takes only that trigger's, oldest first, none of a paused one.
func testHoldAskOfOneTrigger(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	fq := fairQueue(t, e)
	holds(t, e)
	a1 := e.putOf(t, "trigger:a", "a1", nil).QueueID
	c1 := e.putOf(t, "trigger:c", "c1", nil).QueueID
	a2 := e.putOf(t, "trigger:a", "a2", nil).QueueID
	c2 := e.putOf(t, "trigger:c", "c2", nil).QueueID
	p := e.putOf(t, "trigger:p", "p", nil).QueueID
	e.planned(t, fq, []touba.LeaseAsk{ask("trigger:a", 10), ask("trigger:c", 10), ask("trigger:p", 10)},
		[]string{a1, a2}, []string{c1, c2}, []string{p})
	for _, id := range []string{c2, a2, p, c1, a1} {
		e.handBack(t, fq, id, "tool:x", touba.EBindingBusy)
	}
	e.pause(t, "trigger:p")
	got, err := fq.HeldRuns(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got["tool:x"]) != 3 || got["tool:x"]["trigger:a"] != 2 || got["tool:x"]["trigger:c"] != 2 || got["tool:x"]["trigger:p"] != 1 {
		t.Fatalf("held runs %v, want tool:x: a 2, c 2, p 1", got)
	}
	e.planned(t, fq, []touba.LeaseAsk{heldAsk("tool:x", "trigger:c", 1), heldAsk("tool:y", "trigger:a", 10), heldAsk("tool:x", "trigger:p", 10)},
		[]string{c1}, nil, nil)
	e.planned(t, fq, []touba.LeaseAsk{heldAsk("tool:x", "trigger:a", 10), heldAsk("tool:x", "trigger:c", 10)}, []string{a1, a2}, []string{c2})
	e.wantHeldRuns(t, fq, map[string]int64{"tool:x": 1})
	e.resume(t, "trigger:p")
	e.planned(t, fq, []touba.LeaseAsk{heldAsk("tool:x", "trigger:a", 10), heldAsk("tool:x", "trigger:p", 10)}, nil, []string{p})
}
