package dispatcher_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// These tests walk the rows of SPEC §5's table: what a run does when it
// reaches a step whose effect is already journaled. Each row runs with
// toolW bound to the accounting stub and to a real handler process.

// Row 1: applied with a valid stored result: the result is read from the
// journal; no call. The entry fails at its second step the first time; an
// external write's output is not checkpointed (the journal holds it), so
// the replay can only learn the first step's output from the journal.
func TestAppliedEffectIsReadFromJournal(t *testing.T) {
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			dir := t.TempDir()
			billCalls, thenCalls := filepath.Join(dir, "bill.calls"), filepath.Join(dir, "then.calls")
			prog := program(t, 3,
				step{"bill", toolW, map[string]any{"mode": "ok", "calls": billCalls, "data": ref("/event/body/order")}},
				step{"then", toolThen, map[string]any{"mode": "fail", "code": touba.EWebhookRejected, "times": 1,
					"calls": thenCalls, "prev": ref("/steps/bill/output")}})
			w := newWorld(t, prog, manifestOf(t, binding{Tool: toolW, Stub: r.stub, Write: touba.RetryIdempotencyKey},
				binding{Tool: toolThen}), nil, true)
			qid := w.enqueue(trigName, `{"order": 42}`, nil)
			wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EWebhookRejected, 1)

			eff := w.effect(qid, "bill")
			if eff == nil || eff.State != touba.EffectApplied || eff.Result == nil {
				t.Fatalf("effect of bill: %+v, want applied with a result", eff)
			}
			if so, ok := w.steps(qid)["bill"]; ok {
				t.Fatalf("the external write bill was checkpointed (%s): the journal holds its output", so.Output)
			}
			w.replay(qid)
			// A replay starts the entry's retry budget afresh.
			wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
			w.waitRuns(qid, 2)

			if got, want := w.remoteCalls(r, billCalls), 1; got != want {
				t.Fatalf("bill reached the remote side %d times, want %d", got, want)
			}
			if got := w.effect(qid, "bill"); got.Attempts != 1 || got.State != touba.EffectApplied {
				t.Fatalf("effect of bill after replay: %+v, want applied at attempt 1", got)
			}
			tc := calls(t, thenCalls)
			if got, want := len(tc), 2; got != want {
				t.Fatalf("then called %d times, want %d", got, want)
			}
			if prev := field(t, tc[1].Input, "prev"); !jsonEqual(t, prev, eff.Result) {
				t.Fatalf("then saw prev %s, want the journal's result %s", prev, eff.Result)
			}
			if so, ok := w.steps(qid)["bill"]; ok {
				t.Fatalf("the replay checkpointed the external write bill (%s)", so.Output)
			}
		})
	}
}

// Row 2: applied, result missing or not restorable:
// EffectResultUnavailable; no call; entry parked.
func TestAppliedEffectWithoutResultParks(t *testing.T) {
	for _, r := range runners {
		for _, c := range []struct {
			name string
			seed func(w *world, qid, fp string)
		}{
			{"result dropped by the journal", func(w *world, qid, fp string) {
				// The journal drops a result that is not JSON and keeps the
				// state: applied, no result.
				if err := w.seed(qid, "bill", fp, touba.RetryIdempotencyKey, true, touba.EffectApplied,
					json.RawMessage(`{"half":`)); err == nil {
					t.Fatal("Finish stored a result that is not JSON")
				}
			}},
			{"stored result corrupt", func(w *world, qid, fp string) {
				w.journalSQL(`INSERT INTO effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state,
					attempts, call_id, receipt_ref, result, created_at, updated_at)
					VALUES (?, ?, ?, 'invoke', ?, 'idempotency_key', 'applied', 1, 'seed', 'r-1', '{"half":', '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z')`,
					qid, qid+":bill", toolW, fp)
			}},
		} {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				billCalls := filepath.Join(t.TempDir(), "bill.calls")
				in := map[string]any{"mode": "ok", "calls": billCalls, "data": 7}
				w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
					manifestOf(t, binding{Tool: toolW, Stub: r.stub, Write: touba.RetryIdempotencyKey}), nil, false)
				qid := w.enqueue(trigName, `{}`, nil)
				c.seed(w, qid, fingerprint(t, toolW, in))
				w.start()
				wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, touba.EEffectResultUnavailable, 1)
				if got := w.remoteCalls(r, billCalls); got != 0 {
					t.Fatalf("bill reached the remote side %d times, want 0", got)
				}
				if eff := w.effect(qid, "bill"); eff.State != touba.EffectApplied || eff.Attempts != 1 {
					t.Fatalf("effect %+v, want applied at attempt 1, untouched", eff)
				}
				if _, ok := w.steps(qid)["bill"]; ok {
					t.Fatal("a step whose result is unavailable was checkpointed")
				}
			})
		}
	}
}

// Row 3: not_applied or prepared: a new attempt, within the trigger's
// retry limits. The journal rows are left by an earlier process (seeded,
// then the files reopened); the handler process also produces not_applied
// itself, twice, before it applies.
func TestNotAppliedOrPreparedIsAttemptedAgain(t *testing.T) {
	for _, r := range runners {
		for _, c := range []struct {
			name       string
			dispatched bool
			outcome    string
		}{
			{"prepared", false, ""},
			{"not_applied", true, touba.EffectNotApplied},
			{"not_applied before dispatch", false, touba.EffectNotApplied},
		} {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				billCalls := filepath.Join(t.TempDir(), "bill.calls")
				in := map[string]any{"mode": "ok", "calls": billCalls}
				w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
					manifestOf(t, binding{Tool: toolW, Stub: r.stub, Write: touba.RetryNone}), nil, false)
				qid := w.enqueue(trigName, `{}`, nil)
				if err := w.seed(qid, "bill", fingerprint(t, toolW, in), touba.RetryNone, c.dispatched, c.outcome, nil); err != nil {
					t.Fatal(err)
				}
				w.restart()
				wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
				if got, want := w.remoteCalls(r, billCalls), 1; got != want {
					t.Fatalf("bill reached the remote side %d times, want %d", got, want)
				}
				if eff := w.effect(qid, "bill"); eff.State != touba.EffectApplied || eff.Attempts != 2 {
					t.Fatalf("effect %+v, want applied at attempt 2", eff)
				}
				if !r.stub {
					if got := calls(t, billCalls)[0].EffectAttempt; got != 2 {
						t.Fatalf("handler saw effect attempt %d, want 2", got)
					}
				}
			})
		}
	}
	t.Run("process/not_applied by the handler", func(t *testing.T) {
		billCalls := filepath.Join(t.TempDir(), "bill.calls")
		in := map[string]any{"mode": "not_applied", "code": "ExternalWriteRefused", "times": 2, "calls": billCalls}
		w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
			manifestOf(t, binding{Tool: toolW, Write: touba.RetryNone}), nil, true)
		qid := w.enqueue(trigName, `{}`, nil)
		wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 3)
		cs := calls(t, billCalls)
		if got, want := len(cs), 3; got != want {
			t.Fatalf("%d calls, want %d", got, want)
		}
		for i, c := range cs {
			if c.EffectID != qid+":bill" || c.Fingerprint != cs[0].Fingerprint || c.EffectAttempt != i+1 || c.Attempt != i+1 {
				t.Fatalf("call %d: %+v; want effect %s:bill, one fingerprint, attempt %d", i, c, qid, i+1)
			}
		}
		if eff := w.effect(qid, "bill"); eff.State != touba.EffectApplied || eff.Attempts != 3 {
			t.Fatalf("effect %+v, want applied at attempt 3", eff)
		}
	})
}

// Row 4: unknown with retry_mode idempotency_key: the same identity and
// fingerprint are sent again, at the effect's next attempt.
func TestUnknownWithIdempotencyKeyIsSentAgain(t *testing.T) {
	t.Run("accounting_stub/seeded", func(t *testing.T) {
		in := map[string]any{"data": 1}
		w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
			manifestOf(t, binding{Tool: toolW, Stub: true, Write: touba.RetryIdempotencyKey}), nil, false)
		qid := w.enqueue(trigName, `{}`, nil)
		if err := w.seed(qid, "bill", fingerprint(t, toolW, in), touba.RetryIdempotencyKey, true, touba.EffectUnknown, nil); err != nil {
			t.Fatal(err)
		}
		w.start()
		wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
		if got, want := w.stubs.Stub(toolW).Calls(), 1; got != want {
			t.Fatalf("stub called %d times, want %d", got, want)
		}
		if eff := w.effect(qid, "bill"); eff.State != touba.EffectApplied || eff.Attempts != 2 {
			t.Fatalf("effect %+v, want applied at attempt 2", eff)
		}
	})
	for _, mode := range []string{"unknown", "crash"} {
		t.Run("process/"+mode, func(t *testing.T) {
			billCalls := filepath.Join(t.TempDir(), "bill.calls")
			in := map[string]any{"mode": mode, "code": "RemoteTimeout", "times": 1, "calls": billCalls}
			w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
				manifestOf(t, binding{Tool: toolW, Write: touba.RetryIdempotencyKey}), nil, true)
			qid := w.enqueue(trigName, `{}`, nil)
			wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 2)
			cs := calls(t, billCalls)
			if got, want := len(cs), 2; got != want {
				t.Fatalf("%d calls, want %d", got, want)
			}
			if cs[0].EffectID != qid+":bill" || cs[1].EffectID != cs[0].EffectID || cs[1].Fingerprint != cs[0].Fingerprint {
				t.Fatalf("calls %+v: want the same effect id and fingerprint twice", cs)
			}
			if cs[0].EffectAttempt != 1 || cs[1].EffectAttempt != 2 {
				t.Fatalf("effect attempts %d then %d, want 1 then 2", cs[0].EffectAttempt, cs[1].EffectAttempt)
			}
			if eff := w.effect(qid, "bill"); eff.State != touba.EffectApplied || eff.Attempts != 2 {
				t.Fatalf("effect %+v, want applied at attempt 2", eff)
			}
		})
	}
}

// Rows 5 and 6: unknown with retry_mode reconcile or none: the entry is
// parked, with EffectReconciliationRequired or EffectOutcomeUnknown, and
// the handler is not called again, not even when an operator replays the
// entry without resolving the effect.
func TestUnknownWithoutIdempotencyKeyParks(t *testing.T) {
	for _, c := range []struct{ mode, code string }{
		{touba.RetryReconcile, touba.EEffectReconciliationRequired},
		{touba.RetryNone, touba.EEffectOutcomeUnknown},
	} {
		t.Run("accounting_stub/"+c.mode, func(t *testing.T) {
			in := map[string]any{"data": 1}
			w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
				manifestOf(t, binding{Tool: toolW, Stub: true, Write: c.mode}), nil, false)
			qid := w.enqueue(trigName, `{}`, nil)
			if err := w.seed(qid, "bill", fingerprint(t, toolW, in), c.mode, true, touba.EffectUnknown, nil); err != nil {
				t.Fatal(err)
			}
			w.start()
			wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, c.code, 1)
			if got := w.stubs.Stub(toolW).Calls(); got != 0 {
				t.Fatalf("stub called %d times, want 0", got)
			}
			if eff := w.effect(qid, "bill"); eff.State != touba.EffectUnknown || eff.Attempts != 1 {
				t.Fatalf("effect %+v, want unknown at attempt 1", eff)
			}
		})
		for _, mode := range []string{"unknown", "crash"} {
			t.Run("process/"+c.mode+"/"+mode, func(t *testing.T) {
				billCalls := filepath.Join(t.TempDir(), "bill.calls")
				in := map[string]any{"mode": mode, "code": "RemoteTimeout", "calls": billCalls}
				w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
					manifestOf(t, binding{Tool: toolW, Write: c.mode}), nil, true)
				qid := w.enqueue(trigName, `{}`, nil)
				wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, c.code, 1)
				w.replay(qid)
				wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, c.code, 1)
				w.waitRuns(qid, 2)
				if got, want := len(calls(t, billCalls)), 1; got != want {
					t.Fatalf("%d calls, want %d", got, want)
				}
				if eff := w.effect(qid, "bill"); eff.State != touba.EffectUnknown || eff.Attempts != 1 {
					t.Fatalf("effect %+v, want unknown at attempt 1", eff)
				}
			})
		}
	}
}

// Row 7: same identity, different fingerprint: EffectRequestConflict
// before any handler; the entry fails.
func TestDifferentFingerprintConflicts(t *testing.T) {
	for _, r := range runners {
		for _, state := range []string{touba.EffectNotApplied, touba.EffectApplied, touba.EffectUnknown} {
			t.Run(r.name+"/seeded "+state, func(t *testing.T) {
				billCalls := filepath.Join(t.TempDir(), "bill.calls")
				in := map[string]any{"mode": "ok", "calls": billCalls}
				w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
					manifestOf(t, binding{Tool: toolW, Stub: r.stub, Write: touba.RetryIdempotencyKey}), nil, false)
				qid := w.enqueue(trigName, `{}`, nil)
				other := fingerprint(t, toolW, map[string]any{"mode": "ok", "calls": billCalls, "extra": true})
				if err := w.seed(qid, "bill", other, touba.RetryIdempotencyKey, true, state, json.RawMessage(`{}`)); err != nil {
					t.Fatal(err)
				}
				w.start()
				wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EEffectRequestConflict, 1)
				if got := w.remoteCalls(r, billCalls); got != 0 {
					t.Fatalf("bill reached the remote side %d times, want 0", got)
				}
				if eff := w.effect(qid, "bill"); eff.State != state || eff.Fingerprint != other || eff.Attempts != 1 {
					t.Fatalf("effect %+v, want %s with the stored fingerprint, untouched", eff, state)
				}
			})
		}
	}
	// The natural way in: a step's input changes (a reloaded program)
	// between a refused attempt and an operator's replay.
	t.Run("process/reloaded input", func(t *testing.T) {
		billCalls := filepath.Join(t.TempDir(), "bill.calls")
		in := map[string]any{"mode": "not_applied", "code": touba.EWebhookRejected, "calls": billCalls, "data": 1}
		w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
			manifestOf(t, binding{Tool: toolW, Write: touba.RetryIdempotencyKey}), nil, true)
		qid := w.enqueue(trigName, `{}`, nil)
		wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EWebhookRejected, 1)
		in["data"] = 2
		w.reload(program(t, 3, step{"bill", toolW, in}))
		w.replay(qid)
		wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EEffectRequestConflict, 1)
		w.waitRuns(qid, 2)
		if got, want := len(calls(t, billCalls)), 1; got != want {
			t.Fatalf("%d calls, want %d", got, want)
		}
	})
}
