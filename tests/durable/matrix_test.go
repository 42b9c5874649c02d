package durable_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestReloadMatrix (SPEC §2.3 reloads, issue 33): each row is a change a
// reload makes, applied while one order of the changed trigger is in each
// state (pending: its trigger paused; running: its first call held at the
// remote; waiting: for its payment; parked: its first write unknown). The
// row checks what each entry does at the reload and after (the running
// one's call answered, the trigger resumed, payments sent), and that every
// entry parked is settled by an operator. The README's reload table is
// this test, row by row: a change to either must change the other.
func TestReloadMatrix(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"trigger removed", matrixTriggerRemoved},
		{"trigger added back", matrixTriggerAddedBack},
		{"completed step renamed", matrixCompletedStepRenamed},
		{"waited step renamed", func(t *testing.T) { matrixWaitedStepGone(t, true) }},
		{"waited step removed", func(t *testing.T) { matrixWaitedStepGone(t, false) }},
		{"step added", matrixStepAdded},
		{"cancel_on reordered", matrixCancelOnReordered},
		{"wait_for target changed", matrixWaitForTargetChanged},
		{"schedule removed", matrixScheduleRemoved},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			row.run(t)
		})
	}
}

// matrixStart runs the base program, edited by base, with one order in
// each state, and returns the program to edit for the reload.
func matrixStart(t *testing.T, base func(program)) (*world, *matrixRemote, cells, program) {
	p := matrixProgram()
	if base != nil {
		base(p)
	}
	w, r := newMatrixWorld(t, p)
	w.start()
	c := setUp(w, r)
	w.status(c.pending, touba.StatusPending, "")
	next := matrixProgram()
	if base != nil {
		base(next)
	}
	return w, r, c, next
}

// unchanged checks that the reload left the four entries as they were.
func (w *world) unchanged(c cells) {
	w.t.Helper()
	w.status(c.pending, touba.StatusPending, "")
	w.status(c.running, touba.StatusRunning, "")
	w.status(c.waiting, touba.StatusWaiting, "")
	w.status(c.parked, touba.StatusParked, touba.EEffectReconciliationRequired)
}

// goOn resumes the order trigger and answers the held call.
func (w *world) goOn(r *matrixRemote, ref string) {
	w.t.Helper()
	w.cliJSON(nil, "triggers", "resume", ref, "--reason", "matrix")
	r.free()
}

// pay posts the payment of order on the trigger ref, at pointer /order
// (Payment) or /ref (Payment2), and returns its entry.
func (w *world) pay(ref, order string) shown {
	w.t.Helper()
	field := "order"
	if ref == mPayment2 {
		field = "ref"
	}
	qid := w.post(ref, "", fmt.Sprintf(`{"id": "pay-%s-%d", %q: %q}`, order, time.Now().UnixNano(), field, order))
	return w.waitStatus(qid, touba.StatusDone)
}

// resolve settles the parked order's unknown reserve as applied.
func (w *world) resolve(qid string) {
	w.t.Helper()
	w.cliJSON(nil, "effects", "resolve", qid, touba.EffectIDFor(qid, "reserve", 0), "--applied", "--receipt-ref", "res:"+qid)
}

// replay replays qid with the extra flags, and fails unless it was.
func (w *world) replay(qid string, flags ...string) {
	w.t.Helper()
	var rep admin.ReplayReport
	w.cliJSON(&rep, append([]string{"queue", "replay", qid}, flags...)...)
	if len(rep.Items) != 1 || !rep.Items[0].Replayed {
		w.t.Fatalf("replay %s %v: %+v", qid, flags, rep.Items)
	}
}

// replayRefused fails unless a replay of qid is refused with a reason
// holding why.
func (w *world) replayRefused(qid, why string) {
	w.t.Helper()
	stdout, stderr, err := w.cli("queue", "replay", qid)
	if err == nil || !strings.Contains(string(stdout), why) || !strings.Contains(stderr, touba.ENothingReplayed) {
		w.t.Fatalf("replay of %s: err %v, %s%s; want %s saying %q", qid, err, stdout, stderr, touba.ENothingReplayed, why)
	}
}

// calledOnce fails unless the remote saw exactly the effect ids want of
// tool for qid.
func (r *matrixRemote) calledOnce(t *testing.T, tool, qid string, want ...string) {
	t.Helper()
	if got := r.effects(tool, qid); !slices.Equal(got, want) {
		t.Fatalf("%s calls for %s: %v, want %v", tool, qid, got, want)
	}
}

func eff(qid, step string) string { return touba.EffectIDFor(qid, step, 0) }

// Trigger removed: pending and waiting entries park at the reload, the
// running one when its call ends; the parked one stays parked; the
// removed trigger's open wait takes no payment; a replay is refused while
// the program lacks the trigger.
func matrixTriggerRemoved(t *testing.T) {
	w, r, c, next := matrixStart(t, nil)
	next.trigger(mOrder)["ref"] = mOrder + "V2" // the bindings stay in use
	w.reload(next)
	w.waitStatus(c.pending, touba.StatusParked)
	w.status(c.pending, touba.StatusParked, touba.EProgramChanged, mOrder)
	if e := w.waitStatus(c.waiting, touba.StatusParked); e.wait(t, "paid").State != touba.WaitCancelled {
		t.Fatalf("the parked order's wait: %+v, want cancelled", e.wait(t, "paid"))
	}
	w.status(c.waiting, touba.StatusParked, touba.EProgramChanged, mOrder)
	w.status(c.running, touba.StatusRunning, "")
	w.status(c.parked, touba.StatusParked, touba.EEffectReconciliationRequired)
	r.free()
	w.waitStatus(c.running, touba.StatusParked)
	w.status(c.running, touba.StatusParked, touba.EProgramChanged, mOrder)
	r.calledOnce(t, mReserve, c.running, eff(c.running, "reserve"))
	if e := w.pay(mPayment, "o-wait"); len(e.MatchedWaits) != 0 {
		t.Fatalf("a payment matched a wait of a removed trigger: %+v", e.MatchedWaits)
	}
	w.replayRefused(c.pending, mOrder+" is not in the running program")
	r.calledOnce(t, mShip, c.waiting)
}

// Trigger added back: the entries it parked are replayed as they are (the
// definition is the same) and go on, reading back what they wrote.
func matrixTriggerAddedBack(t *testing.T) {
	w, r, c, next := matrixStart(t, nil)
	next.trigger(mOrder)["ref"] = mOrder + "V2"
	w.reload(next)
	w.waitStatus(c.pending, touba.StatusParked)
	w.waitStatus(c.waiting, touba.StatusParked)
	r.free()
	w.waitStatus(c.running, touba.StatusParked)
	w.reload(matrixProgram())
	for _, id := range []string{c.pending, c.waiting, c.running} {
		w.status(id, touba.StatusParked, touba.EProgramChanged)
		w.replay(id)
	}
	w.resolve(c.parked)
	w.cliJSON(nil, "triggers", "resume", mOrder, "--reason", "matrix")
	for _, x := range []struct{ qid, order string }{{c.pending, "o-pend"}, {c.waiting, "o-wait"}, {c.running, "o-run"}, {c.parked, "o-park"}} {
		w.waitStatus(x.qid, touba.StatusWaiting)
		w.pay(mPayment, x.order)
		w.waitStatus(x.qid, touba.StatusDone)
		r.calledOnce(t, mShip, x.qid, eff(x.qid, "ship"))
	}
	r.calledOnce(t, mReserve, c.pending, eff(c.pending, "reserve"))
	r.calledOnce(t, mReserve, c.waiting, eff(c.waiting, "reserve"))
	r.calledOnce(t, mReserve, c.running, eff(c.running, "reserve"))
	r.calledOnce(t, mReserve, c.parked, eff(c.parked, "reserve"))
}

// A completed step renamed: an entry that completed it parks
// ProgramChanged naming it when it next runs (the running one once its
// step ends, the waiting one when its payment wakes it, the parked one
// once resolved), never writing it again under the new name; the pending
// one, which completed nothing, runs the new definition; --repin settles
// a parked one.
func matrixCompletedStepRenamed(t *testing.T) {
	w, r, c, next := matrixStart(t, nil)
	next.step(mOrder, "reserve")["id"] = "reserve_v2"
	w.reload(next)
	w.unchanged(c)
	w.goOn(r, mOrder)
	w.waitStatus(c.running, touba.StatusParked)
	w.status(c.running, touba.StatusParked, touba.EProgramChanged, "reserve")
	w.pay(mPayment, "o-wait")
	w.waitStatus(c.waiting, touba.StatusParked)
	w.status(c.waiting, touba.StatusParked, touba.EProgramChanged, "reserve")
	w.resolve(c.parked)
	w.waitShow(c.parked, "the resolved order to park ProgramChanged", func(e shown) bool { return e.ErrorCode == touba.EProgramChanged })
	w.status(c.parked, touba.StatusParked, touba.EProgramChanged, "reserve")
	w.waitStatus(c.pending, touba.StatusWaiting)
	w.pay(mPayment, "o-pend")
	w.waitStatus(c.pending, touba.StatusDone)
	r.calledOnce(t, mReserve, c.pending, eff(c.pending, "reserve_v2"))
	for _, id := range []string{c.running, c.waiting} {
		r.calledOnce(t, mReserve, id, eff(id, "reserve"))
		r.calledOnce(t, mShip, id)
	}
	w.replayRefused(c.running, "--repin pins it")
	w.replay(c.running, "--repin", "--yes")
	w.waitStatus(c.running, touba.StatusWaiting)
	w.pay(mPayment, "o-run")
	w.waitStatus(c.running, touba.StatusDone)
	r.calledOnce(t, mShip, c.running, eff(c.running, "ship"))
}

// The step an entry waits in renamed or removed: the waiting entry parks
// at the reload naming it, its wait closed; the others go on under the
// new definition (the running one once its call ends, handed back between
// its steps), and --repin settles the parked one.
func matrixWaitedStepGone(t *testing.T, renamed bool) {
	w, r, c, next := matrixStart(t, nil)
	if renamed {
		next.step(mOrder, "paid")["id"] = "paid_v2"
	} else {
		next.removeStep(mOrder, "paid")
	}
	w.reload(next)
	w.waitStatus(c.waiting, touba.StatusParked)
	w.status(c.waiting, touba.StatusParked, touba.EProgramChanged, "paid")
	w.status(c.pending, touba.StatusPending, "")
	w.status(c.running, touba.StatusRunning, "")
	w.status(c.parked, touba.StatusParked, touba.EEffectReconciliationRequired)
	w.goOn(r, mOrder)
	w.resolve(c.parked)
	w.replay(c.waiting, "--repin", "--yes")
	for _, x := range []struct{ qid, order string }{{c.pending, "o-pend"}, {c.waiting, "o-wait"}, {c.running, "o-run"}, {c.parked, "o-park"}} {
		if renamed {
			e := w.waitStatus(x.qid, touba.StatusWaiting)
			if wt := e.wait(t, "paid_v2"); wt.State != touba.WaitOpen {
				t.Fatalf("%s: wait %+v, want open in paid_v2", x.order, wt)
			}
			w.pay(mPayment, x.order)
		}
		w.waitStatus(x.qid, touba.StatusDone)
		r.calledOnce(t, mReserve, x.qid, eff(x.qid, "reserve"))
		r.calledOnce(t, mShip, x.qid, eff(x.qid, "ship"))
	}
}

// A step added after the ones reached: every entry runs it when it gets
// there, the running one too (handed back between its steps).
func matrixStepAdded(t *testing.T) {
	w, r, c, next := matrixStart(t, nil)
	steps := next.trigger(mOrder)["steps"].([]any)
	next.trigger(mOrder)["steps"] = append(steps, map[string]any{"id": "confirm", "tool": mShip,
		"input": map[string]any{"order": ref("/event/body/order"), "confirm": true}})
	w.reload(next)
	w.unchanged(c)
	w.goOn(r, mOrder)
	w.resolve(c.parked)
	for _, x := range []struct{ qid, order string }{{c.pending, "o-pend"}, {c.waiting, "o-wait"}, {c.running, "o-run"}, {c.parked, "o-park"}} {
		w.waitStatus(x.qid, touba.StatusWaiting)
		w.pay(mPayment, x.order)
		w.waitStatus(x.qid, touba.StatusDone)
		r.calledOnce(t, mShip, x.qid, eff(x.qid, "ship"), eff(x.qid, "confirm"))
	}
}

// cancel_on reordered: each entry stays cancellable as it was accepted,
// by meaning (a refund by order, a void by customer), not by position: a
// refund whose order is an entry's customer cancels nothing. A cancel of
// the running entry ends it once its call ends; one of the parked entry
// ends it once the operator settles its write.
func matrixCancelOnReordered(t *testing.T) {
	w, r, c, next := matrixStart(t, nil)
	co := next.trigger(mOrder)["cancel_on"].([]any)
	next.trigger(mOrder)["cancel_on"] = []any{co[1], co[0]}
	w.reload(next)
	w.unchanged(c)
	cancel := func(ref, field, value string) {
		w.post(ref, "", fmt.Sprintf(`{"id": "%s-%s-%d", %q: %q}`, field, value, time.Now().UnixNano(), field, value))
	}
	cancel(mRefund, "order", "c-pend") // an order id equal to the pending entry's customer
	cancel(mRefund, "order", "c-wait")
	cancel(mVoid, "customer", "o-wait") // a customer id equal to the waiting entry's order
	cancel(mVoid, "customer", "c-pend")
	w.waitStatus(c.pending, touba.StatusCancelled)
	if e := w.show(c.pending); !strings.Contains(e.ErrorMessage, mVoid) {
		t.Fatalf("the pending order was cancelled by %q, want by the void", e.ErrorMessage)
	}
	w.status(c.waiting, touba.StatusWaiting, "")
	cancel(mRefund, "order", "o-wait")
	w.waitStatus(c.waiting, touba.StatusCancelled)
	cancel(mVoid, "customer", "c-run")
	cancel(mRefund, "order", "o-park")
	w.status(c.parked, touba.StatusParked, touba.EEffectReconciliationRequired)
	w.goOn(r, mOrder)
	w.waitStatus(c.running, touba.StatusCancelled)
	w.resolve(c.parked)
	w.waitStatus(c.parked, touba.StatusCancelled)
	for _, id := range []string{c.pending, c.waiting, c.running, c.parked} {
		r.calledOnce(t, mShip, id)
	}
	r.calledOnce(t, mReserve, c.running, eff(c.running, "reserve"))
	r.calledOnce(t, mReserve, c.pending)
}

// wait_for's target changed: the waiting entry keeps matching the trigger
// and pointer its wait began with; the others wait under the new target
// when they get there (the running one handed back between its steps).
func matrixWaitForTargetChanged(t *testing.T) {
	w, r, c, next := matrixStart(t, nil)
	next.step(mOrder, "paid")["wait_for"] = map[string]any{"trigger": mPayment2, "match": ref("/event/body/order"), "on": "/body/ref"}
	w.reload(next)
	w.unchanged(c)
	w.goOn(r, mOrder)
	w.pay(mPayment2, "o-wait")
	w.status(c.waiting, touba.StatusWaiting, "")
	w.pay(mPayment, "o-wait")
	w.waitStatus(c.waiting, touba.StatusDone)
	w.resolve(c.parked)
	for _, x := range []struct{ qid, order string }{{c.pending, "o-pend"}, {c.running, "o-run"}, {c.parked, "o-park"}} {
		w.waitStatus(x.qid, touba.StatusWaiting)
		w.pay(mPayment, x.order)
		w.status(x.qid, touba.StatusWaiting, "")
		w.pay(mPayment2, x.order)
		w.waitStatus(x.qid, touba.StatusDone)
	}
	for _, id := range []string{c.pending, c.waiting, c.running, c.parked} {
		r.calledOnce(t, mShip, id, eff(id, "ship"))
	}
}

// A schedule removed: its pending tick parks at the reload (as any entry
// of a removed trigger, row one) and it ticks no more.
func matrixScheduleRemoved(t *testing.T) {
	p := matrixProgram()
	p["triggers"] = append(p["triggers"].([]any), map[string]any{"ref": mTick,
		"source": map[string]any{"kind": "schedule", "cron": "* * * * *", "timezone": "UTC", "catch_up": "none"},
		"steps":  []any{map[string]any{"id": "pull", "tool": mShip, "input": map[string]any{"at": ref("/event/body/scheduled_for")}}}})
	w, _ := newMatrixWorld(t, p)
	w.start()
	w.cliJSON(nil, "triggers", "pause", mTick, "--reason", "matrix")
	// A tick enqueued before the pause took effect runs; the next one
	// waits, pending.
	var tick admin.Entry
	testkit.WaitFor(t, 150*time.Second, func() bool {
		var es []admin.Entry
		w.cliJSON(&es, "queue", "ls", "--trigger", mTick)
		for _, e := range es {
			if e.Status == touba.StatusPending {
				tick = e
				return true
			}
		}
		return false
	}, "a tick of the paused schedule")
	var before []admin.Entry
	w.cliJSON(&before, "queue", "ls", "--trigger", mTick)
	w.reload(matrixProgram())
	w.waitStatus(tick.QueueID, touba.StatusParked)
	w.status(tick.QueueID, touba.StatusParked, touba.EProgramChanged, mTick)
	w.d.WaitLog("schedule removed", waitLong)
	// One period of the cron passes: a schedule still running would tick.
	at, _ := time.Parse(time.RFC3339, tick.EventID)
	next := at.Add(time.Minute + 5*time.Second)
	testkit.WaitFor(t, 2*time.Minute, func() bool { return time.Now().After(next) }, "the next minute's tick time to pass")
	var es []admin.Entry
	w.cliJSON(&es, "queue", "ls", "--trigger", mTick)
	if len(es) != len(before) {
		t.Fatalf("%d entries of the removed schedule, want the %d ticked before the reload: %+v", len(es), len(before), es)
	}
}
