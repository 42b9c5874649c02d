package dispatcher_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// wokeAt reads the woke_at of a sleep step's output.
func wokeAt(tb testing.TB, out json.RawMessage) time.Time {
	tb.Helper()
	var o struct {
		WokeAt string `json:"woke_at"`
	}
	if err := json.Unmarshal(out, &o); err != nil {
		tb.Fatalf("sleep output %s: %v", out, err)
	}
	at, err := time.Parse(time.RFC3339Nano, o.WokeAt)
	if err != nil {
		tb.Fatalf("sleep output %s: %v", out, err)
	}
	return at
}

// A sleep of 200 ms stops the run (the entry waits, its attempt given
// back), wakes on its own and the next run goes on: woke_at is in the
// step's output, the later step reads it through a $ref, and the whole
// entry spent one attempt.
func TestSleepWakesAndContinues(t *testing.T) {
	cf := tmp(t, "calls")
	w := newWorld(t, programOf(t, trig(trigName, nil,
		sleepStep("nap", map[string]any{"ms": 200}),
		toolStep("then", toolThen, okInput(cf, ref("/steps/nap/output/woke_at"))),
	)), processManifest(t, []string{toolThen}), nil, true)
	w.mustWaits()
	begun := time.Now()
	qid := w.enqueue(trigName, `{}`, nil)
	e := w.wait(qid, touba.StatusDone)
	wantEntry(t, e, touba.StatusDone, "", 1)
	out := w.steps(qid)["nap"].Output
	if at := wokeAt(t, out); at.Before(begun.Add(200*time.Millisecond - time.Millisecond)) {
		t.Fatalf("woke at %s, under 200 ms after %s", at, begun)
	}
	cs := calls(t, cf)
	if len(cs) != 1 || !jsonEqual(t, field(t, cs[0].Input, "data"), field(t, out, "woke_at")) {
		t.Fatalf("calls %+v, want one whose data is %s", cs, field(t, out, "woke_at"))
	}
	if got, want := w.runStatuses(qid, 2), []string{touba.StatusWaiting, touba.StatusDone}; !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	ws := w.waitsOf(qid)
	if len(ws) != 1 || ws[0].Kind != touba.WaitSleep || ws[0].State != touba.WaitWoke {
		t.Fatalf("waits %+v, want one sleep woke", ws)
	}
}

// A sleep until a time already past does not wait: the same run goes on,
// with woke_at the step's time.
func TestSleepUntilPastRunsOn(t *testing.T) {
	cf := tmp(t, "calls")
	w := newWorld(t, programOf(t, trig(trigName, nil,
		sleepStep("at", map[string]any{"until": ref("/event/body/at")}),
		toolStep("then", toolThen, okInput(cf, ref("/steps/at/output"))),
	)), processManifest(t, []string{toolThen}), nil, true)
	w.mustWaits()
	qid := w.enqueue(trigName, `{"at": "2001-02-03T04:05:06Z"}`, nil)
	wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
	if got := w.runStatuses(qid, 1); got[0] != touba.StatusDone {
		t.Fatalf("runs %v, want one done", got)
	}
	if at := wokeAt(t, w.steps(qid)["at"].Output); at.Year() < 2026 {
		t.Fatalf("woke_at %s, want the run's time", at)
	}
	if ws := w.waitsOf(qid); len(ws) != 0 {
		t.Fatalf("waits %+v, want none", ws)
	}
	if cs := calls(t, cf); len(cs) != 1 {
		t.Fatalf("calls %+v, want one", cs)
	}
}

// A sleep until a time that is not RFC 3339 fails the run: no retry helps.
func TestSleepUntilNotATime(t *testing.T) {
	cf := tmp(t, "calls")
	w := newWorld(t, programOf(t, trig(trigName, nil,
		sleepStep("at", map[string]any{"until": ref("/event/body/at")}),
		toolStep("then", toolThen, okInput(cf, nil)),
	)), processManifest(t, []string{toolThen}), nil, true)
	w.mustWaits()
	qid := w.enqueue(trigName, `{"at": "tomorrow"}`, nil)
	e := w.wait(qid, touba.StatusFailed)
	if e.ErrorCode != touba.EStepInputUnresolved {
		t.Fatalf("entry %+v, want failed %s", e, touba.EStepInputUnresolved)
	}
	if cs := calls(t, cf); len(cs) != 0 {
		t.Fatalf("calls %+v, want none", cs)
	}
}

// Many sleeps begun at once wake on time: the wake loop sleeps until the
// next one and ends every due wait in batches, so the 99th percentile of
// how late a wait ended (its resolved_at after its wake_at) stays under a
// second while the dispatcher runs the others.
func TestSleepWakesOnTimeUnderLoad(t *testing.T) {
	const n = 400
	w := newWorld(t, programOf(t, trig(trigName, nil,
		sleepStep("nap", map[string]any{"ms": 300}),
		toolStep("then", toolThen, map[string]any{"data": ref("/steps/nap/output")}),
	)), manifestOf(t, binding{Tool: toolThen, Stub: true}), nil, true)
	w.mustWaits()
	qids := make([]string, n)
	for i := range qids {
		qids[i] = w.enqueue(trigName, `{}`, nil)
	}
	var late []time.Duration
	for _, qid := range qids {
		w.wait(qid, touba.StatusDone)
		ws := w.waitsOf(qid)
		if len(ws) != 1 || ws[0].State != touba.WaitWoke || ws[0].WakeAt == nil || ws[0].ResolvedAt == nil {
			t.Fatalf("waits of %s: %+v, want one sleep woke", qid, ws)
		}
		late = append(late, ws[0].ResolvedAt.Sub(*ws[0].WakeAt))
	}
	slices.Sort(late)
	p99 := late[len(late)*99/100]
	t.Logf("wake lateness: median %s, p99 %s, max %s", late[len(late)/2], p99, late[len(late)-1])
	if p99 > time.Second {
		t.Fatalf("p99 wake lateness %s, want under 1s", p99)
	}
}

// A wait spends no attempt: with max_attempts 2, a sleep and then a step
// failing once still has its retry, since the run after the wake is the
// entry's first attempt again.
func TestWaitSpendsNoAttempt(t *testing.T) {
	cf := tmp(t, "calls")
	tr := trig(trigName, nil,
		sleepStep("nap", map[string]any{"ms": 50}),
		toolStep("then", toolThen, map[string]any{"mode": "fail", "times": 1, "calls": cf}),
	)
	tr["retry"] = map[string]any{"max_attempts": 2, "initial_interval_ms": 10, "max_interval_ms": 50}
	w := newWorld(t, programOf(t, tr), processManifest(t, []string{toolThen}), nil, true)
	w.mustWaits()
	qid := w.enqueue(trigName, `{}`, nil)
	wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 2)
	if cs := calls(t, cf); len(cs) != 2 || cs[0].Attempt != 1 || cs[1].Attempt != 2 {
		t.Fatalf("calls %+v, want attempts 1 then 2", cs)
	}
	if got, want := w.runStatuses(qid, 3), []string{touba.StatusWaiting, "retry", touba.StatusDone}; !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
}
