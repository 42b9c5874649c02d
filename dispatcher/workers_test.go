package dispatcher_test

import (
	"fmt"
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// TestManyEntries: entries enqueued together are all run by the workers,
// each effect applied exactly once, each entry's steps fed its own event.
func TestManyEntries(t *testing.T) {
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			const n = 24
			dir := t.TempDir()
			billCalls := filepath.Join(dir, "bill.calls")
			w := newWorld(t, program(t, 3,
				step{"bill", toolW, map[string]any{"mode": "ok", "calls": billCalls, "data": ref("/event/body/n")}}),
				manifestOf(t, binding{Tool: toolW, Stub: r.stub, Write: touba.RetryIdempotencyKey}), nil, true)
			ids := make([]string, n)
			for i := range ids {
				ids[i] = w.enqueue(trigName, fmt.Sprintf(`{"n": %d}`, i), nil)
			}
			for i, qid := range ids {
				wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
				eff := w.effect(qid, "bill")
				if eff == nil || eff.State != touba.EffectApplied || eff.Attempts != 1 {
					t.Fatalf("effect of entry %d: %+v, want applied at attempt 1", i, eff)
				}
				if so, ok := w.steps(qid)["bill"]; ok {
					t.Fatalf("entry %d: the external write was checkpointed (%s): the journal holds its output", i, so.Output)
				}
				out := eff.Result
				key := "payload"
				if !r.stub {
					key = "input"
				}
				if got := field(t, field(t, out, key), "data"); string(got) != fmt.Sprint(i) {
					t.Fatalf("entry %d saw data %s", i, got)
				}
				if r.stub && w.stubs.Stub(toolW).Applied(qid+":bill") != 1 {
					t.Fatalf("entry %d: stub applied its effect %d times", i, w.stubs.Stub(toolW).Applied(qid+":bill"))
				}
			}
			if got := w.remoteCalls(r, billCalls); got != n {
				t.Fatalf("%d calls, want %d", got, n)
			}
		})
	}
}
