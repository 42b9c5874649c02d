package dispatcher_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// failingFinish is the journal with its outcome commits failing while
// failing is set, as a full or broken disk would make them: the call
// happened, its outcome is not on disk.
type failingFinish struct {
	*journal.Journal
	failing  atomic.Bool
	failures atomic.Int64
}

func (f *failingFinish) Finish(ctx context.Context, o touba.EffectOutcome) error {
	if f.failing.Load() {
		f.failures.Add(1)
		return errors.New("disk I/O error (injected)")
	}
	return f.Journal.Finish(ctx, o)
}

// An outcome that cannot be committed parks the entry once with
// EffectOutcomeUnknown; a replay then parks it once more with the code of
// an unknown effect (it does not loop on EffectInProgress, as it did when
// the failed call kept its in-memory claim until a restart), and the
// operator's resolve accepts the effect.
func TestOutcomeCommitFailureParksOnceAndResolves(t *testing.T) {
	for _, c := range []struct{ mode, code string }{
		{touba.RetryNone, touba.EEffectOutcomeUnknown},
		{touba.RetryReconcile, touba.EEffectReconciliationRequired},
	} {
		t.Run(c.mode, func(t *testing.T) {
			in := map[string]any{"data": 1}
			w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
				manifestOf(t, binding{Tool: toolW, Stub: true, Write: c.mode}), nil, false)
			fj := &failingFinish{Journal: w.j}
			fj.failing.Store(true)
			w.d = dispatcher.New(w.q, w.st, fj, w.config(), dispatcher.Options{Workers: 2,
				PollInterval: 10 * time.Millisecond, Log: zerolog.Nop()})
			if err := w.d.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			qid := w.enqueue(trigName, `{}`, nil)
			wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, touba.EEffectOutcomeUnknown, 1)
			if fj.failures.Load() == 0 {
				t.Fatal("no outcome write failed; the test injected nothing")
			}
			fj.failing.Store(false)
			if eff := w.effect(qid, "bill"); eff.State != touba.EffectUnknown {
				t.Fatalf("effect is %s after its outcome failed to commit, want unknown", eff.State)
			}

			w.replay(qid)
			wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, c.code, 1)
			runs := w.waitRuns(qid, 2)
			if got := runs[1].ErrorCode; got != c.code {
				t.Fatalf("second run ended %q, want %q", got, c.code)
			}
			if got := w.stubs.Stub(toolW).Calls(); got != 1 {
				t.Fatalf("stub called %d times, want 1", got)
			}
			if err := w.j.Resolve(context.Background(), qid, qid+":bill", journal.NotApplied()); err != nil {
				t.Fatalf("resolve: %v", err)
			}
			if eff := w.effect(qid, "bill"); eff.State != touba.EffectNotApplied {
				t.Fatalf("effect is %s after resolve, want not_applied", eff.State)
			}
		})
	}
}
