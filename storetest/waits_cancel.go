package storetest

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Cancellation by cancel_on (SPEC §2.3): a matching delivery ends pending
// and waiting entries cancelled at once and asks running ones to cancel,
// which their next transition other than done or parked does; a cancelled
// entry is replayed like a failed one and waits again.

func testCancel(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	sleeper := e.waiter(t, "sleeper", "1")
	end := e.clock.Now().Add(time.Hour)
	e.begin(t, ws, sleepFor(sleeper, "nap", end))
	running := e.waiter(t, "running", "1")
	pending := e.putOf(t, "trigger:a", "pending", func(d *touba.Delivery) {
		d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: "1"}}
	}).QueueID
	other := e.putOf(t, "trigger:a", "other", func(d *touba.Delivery) {
		d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: "2"}}
	}).QueueID
	e.wantPending(t, 2)

	r := e.putOf(t, "trigger:b", "b", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
	})
	got := append([]string(nil), r.Cancelled...)
	sort.Strings(got)
	want := []string{sleeper, running, pending}
	sort.Strings(want)
	if !slices.Equal(got, want) || len(r.Matched) != 0 {
		t.Fatalf("cancelled %v, want %v", r.Cancelled, want)
	}
	e.wantPending(t, 2) // other and b
	e.wantStatus(t, pending, touba.StatusCancelled, touba.ERunCancelled)
	e.wantStatus(t, sleeper, touba.StatusCancelled, touba.ERunCancelled)
	e.wantStatus(t, other, touba.StatusPending, "")
	if d, _ := e.Queue.Detail(e.ctx, pending); d == nil || d.ErrorMessage == "" {
		t.Fatalf("cancelled entry's detail %+v: want a message naming the cancelling delivery", d)
	}
	if w, ok := e.waitOf(t, ws, sleeper, "nap"); !ok || w.State != touba.WaitCancelled {
		t.Fatalf("cancelled sleeper's wait: %+v (%v), want cancelled", w, ok)
	}
	e.wantNextWake(t, ws, nil)
	// The running one goes on until its next transition.
	e.wantStatus(t, running, touba.StatusRunning, "")
	for id, want := range map[string]bool{running: true, other: false, pending: false} {
		if req, err := ws.CancelRequested(e.ctx, id); err != nil || req != want {
			t.Fatalf("cancel requested of %s: %v, %v; want %v", id, req, err, want)
		}
	}
	if err := e.Queue.Retry(e.ctx, running, e.tok(running), e.clock.Now(), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatalf("retry of an entry asked to cancel: %v", err)
	}
	e.wantStatus(t, running, touba.StatusCancelled, touba.ERunCancelled)
	e.wantPending(t, 2)
	if c, err := e.Queue.CountByStatus(e.ctx); err != nil || c[touba.StatusCancelled] != 3 {
		t.Fatalf("counts %v, %v; want 3 cancelled", c, err)
	}
}

// testCancelRequested: what each ending does to an entry asked to cancel
// while it runs.
func testCancelRequested(t *testing.T, f Factory) {
	tests := []struct {
		name string
		end  func(e *env, ws touba.WaitStore, id string) error
		want string
	}{
		{"Retry", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Retry(e.ctx, id, e.tok(id), e.clock.Now(), "X", "x")
		}, touba.StatusCancelled},
		{"Postpone", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Postpone(e.ctx, id, e.tok(id), e.clock.Now(), "X", "x")
		}, touba.StatusCancelled},
		{"FinishFailed", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusFailed, touba.EHandlerFailed, "x")
		}, touba.StatusCancelled},
		{"FinishCancelled", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusCancelled, touba.ERunCancelled, "seen before a step")
		}, touba.StatusCancelled},
		{"BeginWait", func(e *env, ws touba.WaitStore, id string) error {
			w, err := ws.BeginWait(e.ctx, e.tok(id), sleepFor(id, "nap", e.clock.Now().Add(time.Hour)))
			if err == nil && w.State != touba.WaitCancelled {
				return fmt.Errorf("wait %+v, want cancelled", w)
			}
			return err
		}, touba.StatusCancelled},
		{"FinishDoneStaysDone", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusDone, "", "")
		}, touba.StatusDone},
		{"FinishParkedStaysParked", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusParked, touba.EEffectOutcomeUnknown, "x")
		}, touba.StatusParked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t, f, Options{})
			ws := waitStore(t, e)
			id := e.waiter(t, "a", "1")
			e.putOf(t, "trigger:b", "b", func(d *touba.Delivery) {
				d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
			})
			if err := tc.end(e, ws, id); err != nil {
				t.Fatal(err)
			}
			code := ""
			if tc.want == touba.StatusCancelled {
				code = touba.ERunCancelled
			}
			e.wantStatus(t, id, tc.want, code)
			e.wantPending(t, 1) // b only
			e.wantNextWake(t, ws, nil)
			if w, ok := e.waitOf(t, ws, id, "nap"); ok && w.State == touba.WaitOpen {
				t.Fatalf("open wait %+v left on a cancelled entry", w)
			}
		})
	}
}

// testReplayCancelled: an entry cancelled while it waited, replayed, waits
// again (its cancelled wait is gone, and so is the cancel request).
func testReplayCancelled(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "1")
	e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil))
	running := e.waiter(t, "running", "1")
	e.putOf(t, "trigger:b", "b", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
	})
	if err := e.Queue.Finish(e.ctx, running, e.tok(running), touba.StatusFailed, "X", "x"); err != nil {
		t.Fatal(err)
	}
	e.wantStatus(t, running, touba.StatusCancelled, touba.ERunCancelled)
	res, err := e.Queue.Replay(e.ctx, []string{a, running}, touba.ReplayOptions{})
	if err != nil || len(res) != 2 || res[0].From != touba.StatusCancelled || res[1].From != touba.StatusCancelled {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	e.wantPending(t, 3)
	for _, id := range []string{a, running} {
		if req, err := ws.CancelRequested(e.ctx, id); err != nil || req {
			t.Fatalf("cancel requested of replayed %s: %v, %v", id, req, err)
		}
	}
	e.lease(t, 10, a, running, e.entryOf(t, "trigger:b", "b"))
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("replayed entry's wait: %+v, want open again", got)
	}
	e.finish(t, running, touba.StatusFailed)
	e.wantStatus(t, running, touba.StatusFailed, "")

	// So does one resumed from a later step: its cancelled wait never
	// completed the step.
	e.putOf(t, "trigger:b", "b2", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
	})
	e.wantStatus(t, a, touba.StatusCancelled, touba.ERunCancelled)
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: a, Steps: []string{"after-await"}}); err != nil {
		t.Fatal(err)
	}
	e.lease(t, 10, a, e.entryOf(t, "trigger:b", "b2"))
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("resumed entry's wait: %+v, want open again", got)
	}
}

// entryOf is the queue id of ref's entry of eventID.
func (e *env) entryOf(t *testing.T, ref, eventID string) string {
	t.Helper()
	for _, d := range e.entries(t) {
		if d.TriggerRef == ref && d.EventID == eventID {
			return d.QueueID
		}
	}
	t.Fatalf("no entry %s/%s", ref, eventID)
	return ""
}
