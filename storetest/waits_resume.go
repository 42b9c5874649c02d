package storetest

import (
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Resume from a step (SPEC §6 queue resume): only ended entries, the
// resumed steps' waits removed and their offers released, effect
// generations moved on only with new effects.

func testResume(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	// Refused while the entry is pending, running or waiting.
	waiting := e.waiter(t, "waiting", "")
	e.begin(t, ws, sleepFor(waiting, "nap", e.clock.Now().Add(time.Hour)))
	running := e.waiter(t, "running", "")
	pending := e.putOf(t, "trigger:p", "pending", nil).QueueID
	for _, id := range []string{pending, waiting, running} {
		_, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: id, Steps: []string{"nap"}})
		if touba.ErrorCode(err) != touba.EEntryNotResumable {
			t.Fatalf("resume of %s: %v, want %s", id, err, touba.EEntryNotResumable)
		}
	}
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: "no-such-entry", Steps: []string{"nap"}}); err == nil {
		t.Fatal("resume of no entry accepted")
	}
	e.wantStatus(t, running, touba.StatusRunning, "")
	e.wantStatus(t, waiting, touba.StatusWaiting, "")
	e.wantPending(t, 1)

	// waiting ends done with its sleep woke; running ends failed with two
	// ended waits.
	e.clock.Add(time.Hour)
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 10, waiting, pending)
	e.finish(t, pending, touba.StatusDone)
	e.begin(t, ws, sleepFor(waiting, "nap", e.clock.Now()))
	e.finish(t, waiting, touba.StatusDone)
	timeout := e.clock.Now()
	e.begin(t, ws, eventWait(running, "await", keyA, `1`, &timeout))
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 10, running)
	if got := e.begin(t, ws, eventWait(running, "await", keyA, `1`, &timeout)); got.State != touba.WaitTimedOut {
		t.Fatalf("wait: %+v, want timed_out", got)
	}
	e.begin(t, ws, sleepFor(running, "later", e.clock.Now()))
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 10, running)
	if err := e.Queue.Finish(e.ctx, running, e.tok(running), touba.StatusFailed, touba.EWaitTimedOut, "no match"); err != nil {
		t.Fatal(err)
	}
	e.wantPending(t, 0)
	if g, err := ws.EffectGens(e.ctx, running); err != nil || len(g) != 0 {
		t.Fatalf("effect gens before any resume: %v, %v", g, err)
	}
	res, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: running, Steps: []string{"await", "later"}})
	if err != nil || res.From != touba.StatusFailed || res.QueueID != running || res.Gens["await"] != 0 || res.Gens["later"] != 0 {
		t.Fatalf("resume: %+v, %v", res, err)
	}
	got := e.wantStatus(t, running, touba.StatusPending, "")
	if got.Attempts != 0 || got.ErrorCode != "" {
		t.Fatalf("resumed entry: attempts %d, error %q; want 0 and none", got.Attempts, got.ErrorCode)
	}
	e.wantPending(t, 1)
	if all, err := ws.Waits(e.ctx, running); err != nil || len(all) != 0 {
		t.Fatalf("waits after the resume: %+v, %v; want none", all, err)
	}
	if g, err := ws.EffectGens(e.ctx, running); err != nil || g["await"] != 0 || g["later"] != 0 {
		t.Fatalf("effect gens after a resume without new effects: %v, %v", g, err)
	}

	// With new effects, each resumed step's generation moves on, the
	// others' stay.
	e.lease(t, 10, running)
	e.finish(t, running, touba.StatusDone)
	if res, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: running, Steps: []string{"await", "later"}, NewEffects: true}); err != nil ||
		res.From != touba.StatusDone || res.Gens["await"] != 1 || res.Gens["later"] != 1 {
		t.Fatalf("resume with new effects: %+v, %v", res, err)
	}
	e.lease(t, 10, running)
	e.finish(t, running, touba.StatusParked)
	if res, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: running, Steps: []string{"later"}, NewEffects: true}); err != nil ||
		res.From != touba.StatusParked || res.Gens["later"] != 2 {
		t.Fatalf("second resume with new effects: %+v, %v", res, err)
	}
	if g, err := ws.EffectGens(e.ctx, running); err != nil || g["await"] != 1 || g["later"] != 2 {
		t.Fatalf("effect gens: %v, %v; want await 1, later 2", g, err)
	}
	e.wantPending(t, 1)
	// A resume does not touch the waits of the steps before it.
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: waiting, Steps: []string{"after-nap"}}); err != nil {
		t.Fatal(err)
	}
	if w, ok := e.waitOf(t, ws, waiting, "nap"); !ok || w.State != touba.WaitWoke {
		t.Fatalf("wait of an earlier step after a resume: %+v (%v), want woke, kept", w, ok)
	}
	e.wantPending(t, 2)
}

// testResumeOffers: a resumed step's wait is gone and the offer it
// consumed goes back: the resumed run's wait takes the earliest again.
func testResumeOffers(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "")
	e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil))
	b1 := e.offering(t, "b1", `1`, keyA).QueueID // matches a at enqueue
	e.clock.Add(time.Second)
	b2 := e.offering(t, "b2", `1`, keyA).QueueID // stored unconsumed
	e.lease(t, 10, a, b1, b2)
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.MatchedQueueID != b1 {
		t.Fatalf("wait: %+v, want matched by %s", got, b1)
	}
	e.finish(t, a, touba.StatusDone)
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: a, Steps: []string{"await"}}); err != nil {
		t.Fatal(err)
	}
	if all, err := ws.Waits(e.ctx, a); err != nil || len(all) != 0 {
		t.Fatalf("waits after the resume: %+v, %v; want none", all, err)
	}
	e.lease(t, 10, a)
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != b1 {
		t.Fatalf("resumed run's wait: %+v, want matched by %s again (its offer released)", got, b1)
	}
	// b2's offer is still there for another waiter.
	c := e.waiter(t, "c", "")
	if got := e.begin(t, ws, eventWait(c, "await", keyA, `1`, nil)); got.MatchedQueueID != b2 {
		t.Fatalf("another wait: %+v, want matched by %s", got, b2)
	}
}
