package crash_test

import (
	"os"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestKillMidCall SIGKILLs the daemon from outside while two handlers are
// mid-call: each has written at the remote and holds its answer (while the
// remote's .hold file exists). After a restart the two effects, found
// dispatched, are unknown: retried into the remote's deduplication with an
// idempotency key, parked otherwise, and never written twice.
func TestKillMidCall(t *testing.T) {
	const workers = 2
	for _, mode := range retryModes {
		for _, kind := range handlerKinds {
			t.Run(mode+"/"+kind, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, mode, kind)
				holdFile := w.remote + ".hold"
				if err := os.WriteFile(holdFile, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				// The orphaned handlers of the killed daemon end once released.
				t.Cleanup(func() { os.Remove(holdFile) })

				d := testkit.Start(t, nil, w.args("--workers", "2")...)
				w.send(d, deliveries)
				testkit.WaitFor(t, 30*time.Second, func() bool {
					return len(w.remoteLines()) >= workers
				}, "two handlers holding their answers")
				d.Kill()
				if err := os.Remove(holdFile); err != nil {
					t.Fatal(err)
				}

				// Both workers were blocked: exactly their first effects reached
				// the remote, and the journal says they were dispatched.
				lines := w.remoteLines()
				if len(lines) != workers {
					t.Fatalf("the remote saw %d requests before the kill, want %d: %+v", len(lines), workers, lines)
				}
				effects, _ := w.effects()
				want := map[string]end{}
				for _, l := range lines {
					e := effects[l.EffectID]
					if e.State != touba.EffectDispatched || l.EffectID != effectID(e.Scope, stepWrite) {
						t.Fatalf("held call %s: journal says %+v, want the write step dispatched", l.EffectID, e)
					}
					want[e.Scope] = parkedAfter(1)
					if mode == touba.RetryIdempotencyKey {
						want[e.Scope] = doneAfter(2, 2)
					}
				}

				d = w.restart(workers)
				for _, l := range lines {
					w.checkRecovered(d.Log(), l.EffectID)
				}
				w.settle(d)
				w.check(want)
			})
		}
	}
}
