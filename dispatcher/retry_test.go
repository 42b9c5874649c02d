package dispatcher_test

import (
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// TestRetriesExhausted: a run that keeps failing with a retryable error is
// retried up to the trigger's max_attempts, then the entry is failed with
// the last code (SPEC §2.1 retry, §3.2).
func TestRetriesExhausted(t *testing.T) {
	for _, c := range []struct {
		name, mode, write, code, effect string
	}{
		{"external write not applied", "not_applied", touba.RetryNone, "ExternalWriteRefused", touba.EffectNotApplied},
		{"external write unknown, idempotency key", "unknown", touba.RetryIdempotencyKey, "RemoteTimeout", touba.EffectUnknown},
		{"external write crash, idempotency key", "crash", touba.RetryIdempotencyKey, touba.EHandlerFailed, touba.EffectUnknown},
		{"none contract business error", "fail", "", "Boom", ""},
		{"none contract crash", "crash", "", touba.EHandlerFailed, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			const max = 3
			billCalls := filepath.Join(t.TempDir(), "bill.calls")
			w := newWorld(t, program(t, max, step{"bill", toolW, map[string]any{"mode": c.mode, "code": c.code, "calls": billCalls}}),
				manifestOf(t, binding{Tool: toolW, Write: c.write}), nil, true)
			qid := w.enqueue(trigName, `{}`, nil)
			wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, c.code, max)
			cs := calls(t, billCalls)
			if got := len(cs); got != max {
				t.Fatalf("%d calls, want %d", got, max)
			}
			for i, call := range cs {
				if call.Attempt != i+1 {
					t.Fatalf("call %d carried context.attempt %d, want %d", i, call.Attempt, i+1)
				}
			}
			runs := w.waitRuns(qid, max)
			for i, r := range runs {
				want := "retry"
				if i == max-1 {
					want = touba.StatusFailed
				}
				if r.Status != want || r.ErrorCode != c.code || r.Attempt != i+1 {
					t.Fatalf("run %d: %+v, want %s with %s at attempt %d", i, r, want, c.code, i+1)
				}
			}
			eff := w.effect(qid, "bill")
			switch {
			case c.effect == "" && eff != nil:
				t.Fatalf("a none-contract step was journaled: %+v", eff)
			case c.effect != "" && (eff == nil || eff.State != c.effect || eff.Attempts != max):
				t.Fatalf("effect %+v, want %s at attempt %d", eff, c.effect, max)
			}
		})
	}
}

// TestRetriesExhaustedReportsLastCode: the entry fails with the code of
// its last run, not its first.
func TestRetriesExhaustedReportsLastCode(t *testing.T) {
	billCalls := filepath.Join(t.TempDir(), "bill.calls")
	in := map[string]any{"mode": "unknown", "code": "RemoteTimeout", "times": 1,
		"after": "not_applied", "after_code": "ExternalWriteRefused", "calls": billCalls}
	w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
		manifestOf(t, binding{Tool: toolW, Write: touba.RetryIdempotencyKey}), nil, true)
	qid := w.enqueue(trigName, `{}`, nil)
	wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, "ExternalWriteRefused", 3)
	runs := w.waitRuns(qid, 3)
	for i, want := range []string{"RemoteTimeout", "ExternalWriteRefused", "ExternalWriteRefused"} {
		if runs[i].ErrorCode != want {
			t.Fatalf("run %d ended with %q, want %q", i, runs[i].ErrorCode, want)
		}
	}
	if eff := w.effect(qid, "bill"); eff.State != touba.EffectNotApplied || eff.Attempts != 3 {
		t.Fatalf("effect %+v, want not_applied at attempt 3", eff)
	}
}

// TestPermanentErrorIsNotRetried: codes a retry cannot change fail the
// entry at once.
func TestPermanentErrorIsNotRetried(t *testing.T) {
	for _, code := range []string{touba.EWebhookRejected, touba.EGrantMissing} {
		t.Run(code, func(t *testing.T) {
			billCalls := filepath.Join(t.TempDir(), "bill.calls")
			w := newWorld(t, program(t, 5, step{"bill", toolW, map[string]any{"mode": "not_applied", "code": code, "calls": billCalls}}),
				manifestOf(t, binding{Tool: toolW, Write: touba.RetryIdempotencyKey}), nil, true)
			qid := w.enqueue(trigName, `{}`, nil)
			wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, code, 1)
			if got := len(calls(t, billCalls)); got != 1 {
				t.Fatalf("%d calls, want 1", got)
			}
		})
	}
}

// TestNoneContractStep: a step of a binding with effect_contract none
// never touches the journal, and, having no effect to protect, runs again
// when a replay finds no checkpoint for it, where an external write would
// be read back from the journal.
func TestNoneContractStep(t *testing.T) {
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			w, qid, lookCalls, thenCalls := lookThenFailed(t, r)
			if got := w.effects(qid); len(got) != 0 {
				t.Fatalf("effects journaled: %+v, want none", got)
			}
			if !r.stub {
				if c := calls(t, lookCalls); len(c) != 1 || c[0].EffectID != "" {
					t.Fatalf("calls %+v: want one call without context.effect", c)
				}
			}

			// The failed step itself has no checkpoint: a replay runs it
			// again. The first step's checkpoint is lost too, and with no
			// journal entry behind it, it runs again as well.
			w.forgetCheckpoint(qid, "look")
			w.replay(qid)
			wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
			if got, want := w.remoteCalls(r, lookCalls), 2; got != want {
				t.Fatalf("look ran %d times, want %d", got, want)
			}
			if got, want := len(calls(t, thenCalls)), 2; got != want {
				t.Fatalf("then ran %d times, want %d", got, want)
			}
			if got := w.effects(qid); len(got) != 0 {
				t.Fatalf("effects journaled: %+v, want none", got)
			}
		})
	}
}

// TestReplayReadsCheckpoints: a replayed entry's run reads its checkpoints,
// though a first run does not (Delivery.FirstLease): the none step that
// succeeded before the failure is not run again. Were the replay's lease
// taken for a first one, look would run twice.
func TestReplayReadsCheckpoints(t *testing.T) {
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			w, qid, lookCalls, thenCalls := lookThenFailed(t, r)
			w.replay(qid)
			wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
			if got, want := w.remoteCalls(r, lookCalls), 1; got != want {
				t.Fatalf("look ran %d times, want %d: the replay did not read its checkpoint", got, want)
			}
			if got, want := len(calls(t, thenCalls)), 2; got != want {
				t.Fatalf("then ran %d times, want %d", got, want)
			}
		})
	}
}

// lookThenFailed runs an entry through two none-contract steps, look (on
// r) and then, which fails once with a code no retry can change: the entry
// ends failed after look succeeded and was checkpointed.
func lookThenFailed(t *testing.T, r runner) (w *world, qid, lookCalls, thenCalls string) {
	t.Helper()
	dir := t.TempDir()
	lookCalls, thenCalls = filepath.Join(dir, "look.calls"), filepath.Join(dir, "then.calls")
	prog := program(t, 3,
		step{"look", toolW, map[string]any{"mode": "ok", "calls": lookCalls}},
		step{"then", toolThen, map[string]any{"mode": "fail", "code": touba.EWebhookRejected, "times": 1,
			"calls": thenCalls, "prev": ref("/steps/look/output")}})
	w = newWorld(t, prog, manifestOf(t, binding{Tool: toolW, Stub: r.stub}, binding{Tool: toolThen}), nil, true)
	qid = w.enqueue(trigName, `{}`, nil)
	wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EWebhookRejected, 1)
	return w, qid, lookCalls, thenCalls
}
