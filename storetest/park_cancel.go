package storetest

import (
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// A cancel requested while a step ran survives the park (SPEC §2.3
// reloads): the operator's settling of the parked entry (a replay, the
// replay after `effects resolve`, or a resume) ends it cancelled without
// another step, its key let go; with IgnoreCancel it goes on, the request
// dropped.

// parkedAskedToCancel is a keyed entry (max 1) asked to cancel while it
// ran, then parked; a later entry of its key waits behind it.
func (e *env) parkedAskedToCancel(t *testing.T, eventID string) (parked, behind string) {
	t.Helper()
	parked = e.keyedOf(t, "trigger:a", eventID, "k-"+eventID, "c-"+eventID)
	e.lease(t, 10, parked)
	e.cancelling(t, "cancel-"+eventID, "c-"+eventID)
	if err := e.Queue.Finish(e.ctx, parked, e.tok(parked), touba.StatusParked, touba.EEffectOutcomeUnknown, "x"); err != nil {
		t.Fatal(err)
	}
	e.wantStatus(t, parked, touba.StatusParked, touba.EEffectOutcomeUnknown)
	behind = e.keyedOf(t, "trigger:a", eventID+"-next", "k-"+eventID, "")
	return parked, behind
}

func testCancelSurvivesPark(t *testing.T, f Factory) {
	settle := map[string]func(e *env, ws touba.WaitStore, id string, ignore bool) (from, to string){
		"Replay": func(e *env, _ touba.WaitStore, id string, ignore bool) (string, string) {
			res, err := e.Queue.Replay(e.ctx, []string{id}, touba.ReplayOptions{IgnoreCancel: ignore})
			if err != nil || len(res) != 1 {
				t.Fatalf("replay: %+v, %v", res, err)
			}
			return res[0].From, res[0].To
		},
		"Resume": func(e *env, ws touba.WaitStore, id string, ignore bool) (string, string) {
			res, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: id, Steps: []string{"s"}, IgnoreCancel: ignore})
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			return res.From, res.To
		},
	}
	for name, do := range settle {
		t.Run(name, func(t *testing.T) {
			e := open(t, f, Options{})
			ws := waitStore(t, e)
			parked, behind := e.parkedAskedToCancel(t, "p")
			e.lease(t, 10, e.entryOf(t, "trigger:b", "cancel-p")) // the key's later entry waits: nothing of a
			if from, to := do(e, ws, parked, false); from != touba.StatusParked || to != touba.StatusCancelled {
				t.Fatalf("settled from %q to %q, want parked to cancelled", from, to)
			}
			e.wantStatus(t, parked, touba.StatusCancelled, touba.ERunCancelled)
			if det, err := e.Queue.Detail(e.ctx, parked); err != nil || !strings.Contains(det.ErrorMessage, "cancel-p") {
				t.Fatalf("cancelled entry's message %+v (%v) names no cancelling delivery", det, err)
			}
			e.lease(t, 10, behind) // its key let go
			if req, err := ws.CancelRequested(e.ctx, parked); err != nil || req {
				t.Fatalf("cancel request left on the cancelled entry: %v, %v", req, err)
			}

			// --ignore-cancel: it goes on, the request dropped, its key
			// taken again ahead of later entries.
			e2 := open(t, f, Options{})
			ws2 := waitStore(t, e2)
			parked2, behind2 := e2.parkedAskedToCancel(t, "q")
			if from, to := do(e2, ws2, parked2, true); from != touba.StatusParked || to != touba.StatusPending {
				t.Fatalf("settled with IgnoreCancel from %q to %q, want parked to pending", from, to)
			}
			if req, err := ws2.CancelRequested(e2.ctx, parked2); err != nil || req {
				t.Fatalf("cancel request kept after IgnoreCancel: %v, %v", req, err)
			}
			e2.lease(t, 10, parked2, e2.entryOf(t, "trigger:b", "cancel-q"))
			_ = behind2
		})
	}
}

// testCancelWhileParked: a cancel_on match accepted while the entry is
// parked leaves it parked (its unknown write must still reach an
// operator) and holding its key, asked to cancel; settled, it ends
// cancelled and lets its key go.
func testCancelWhileParked(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	parked := e.keyedOf(t, "trigger:a", "p", "k-p", "c-p")
	e.lease(t, 10, parked)
	if err := e.Queue.Finish(e.ctx, parked, e.tok(parked), touba.StatusParked, touba.EEffectOutcomeUnknown, "x"); err != nil {
		t.Fatal(err)
	}
	behind := e.keyedOf(t, "trigger:a", "p-next", "k-p", "")
	e.cancelling(t, "cancel-p", "c-p")
	e.wantStatus(t, parked, touba.StatusParked, touba.EEffectOutcomeUnknown)
	if req, err := ws.CancelRequested(e.ctx, parked); err != nil || !req {
		t.Fatalf("a cancel accepted while parked: requested %v (%v), want kept for the operator's settling", req, err)
	}
	e.lease(t, 10, e.entryOf(t, "trigger:b", "cancel-p")) // the key's later entry still waits
	res, err := e.Queue.Replay(e.ctx, []string{parked}, touba.ReplayOptions{})
	if err != nil || len(res) != 1 || res[0].To != touba.StatusCancelled {
		t.Fatalf("replay of the parked entry asked to cancel: %+v, %v; want it cancelled", res, err)
	}
	e.wantStatus(t, parked, touba.StatusCancelled, touba.ERunCancelled)
	e.lease(t, 10, behind)
}

// testRepin: Replay and Resume with Repin pin the entry to the digest
// given (its trigger's running definition); without, it keeps its own.
func testRepin(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	id := e.putOf(t, "trigger:a", "pinned", func(d *touba.Delivery) { d.ProgramDigest = "old" }).QueueID
	park := func() {
		t.Helper()
		e.lease(t, 10, id)
		if err := e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusParked, touba.EProgramChanged, "x"); err != nil {
			t.Fatal(err)
		}
	}
	digest := func(want string) {
		t.Helper()
		if got := e.get(t, id).ProgramDigest; got != want {
			t.Fatalf("program digest %q, want %q", got, want)
		}
	}
	park()
	if _, err := e.Queue.Replay(e.ctx, []string{id}, touba.ReplayOptions{Repin: map[string]string{"trigger:b": "other"}}); err != nil {
		t.Fatal(err)
	}
	digest("old") // another trigger's pin changes nothing here
	park()
	if _, err := e.Queue.Replay(e.ctx, []string{id}, touba.ReplayOptions{Repin: map[string]string{"trigger:a": "new"}}); err != nil {
		t.Fatal(err)
	}
	digest("new")
	park()
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: id, Steps: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	digest("new")
	park()
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: id, Steps: []string{"s"}, Repin: "newer"}); err != nil {
		t.Fatal(err)
	}
	digest("newer")
}
