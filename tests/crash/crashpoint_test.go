package crash_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// deliveries is how many deliveries each scenario acknowledges.
const deliveries = 5

// atCrash is what the files hold right after the crash, for the first
// entry (the only one leased, with one worker): the states of its two
// effects ("" for none) and how many requests reached the remote in all.
type atCrash struct {
	write, confirm string
	requests       int
}

// crashPoints are every named crash point with what the files hold when
// it fires. The dispatcher's fire at the first entry's first effect (or,
// for after-checkpoint, after its last step); the journal's own fire in
// its first commit, which is start-up recovery, before any entry is leased.
var crashPoints = []struct {
	point string
	at    atCrash
	// after is the end of the first entry once restarted, by retry mode.
	after func(retryMode string) end
}{
	{dispatcher.CrashAfterPrepared, atCrash{touba.EffectPrepared, "", 0},
		// Nothing was sent: any mode attempts it again.
		func(string) end { return doneAfter(1, 2) }},
	{dispatcher.CrashAfterDispatched, atCrash{touba.EffectDispatched, "", 0},
		// Recovery cannot know that the request never left.
		func(m string) end {
			if m == touba.RetryIdempotencyKey {
				return doneAfter(1, 2)
			}
			return parkedAfter(0)
		}},
	{dispatcher.CrashAfterAnswer, atCrash{touba.EffectDispatched, "", 1},
		// Applied at the remote, outcome lost: only a deduplicating
		// remote may see it again, and it writes nothing new.
		func(m string) end {
			if m == touba.RetryIdempotencyKey {
				return doneAfter(2, 2)
			}
			return parkedAfter(1)
		}},
	{dispatcher.CrashAfterOutcome, atCrash{touba.EffectApplied, "", 1},
		// The result is read from the journal; no call.
		func(string) end { return plain }},
	{dispatcher.CrashAfterCheckpoint, atCrash{touba.EffectApplied, touba.EffectApplied, 2},
		func(string) end { return plain }},
	{journal.CrashBeforeCommit, atCrash{"", "", 0}, func(string) end { return plain }},
	{journal.CrashAfterCommit, atCrash{"", "", 0}, func(string) end { return plain }},
}

// TestCrashPoints runs, for every crash point, every retry mode and both
// ways a process handler runs (one-shot, persistent):
// acknowledge 5 deliveries with an intake-only daemon (so all are on disk
// before anything runs), start the daemon with the crash point armed and
// one worker until it SIGKILLs itself, check what the files hold at that
// moment, restart it without the crash point (taking over the stale lock),
// let it finish, stop it with SIGTERM and check the invariants.
func TestCrashPoints(t *testing.T) {
	for _, cp := range crashPoints {
		for _, mode := range retryModes {
			for _, kind := range handlerKinds {
				t.Run(cp.point+"/"+mode+"/"+kind, func(t *testing.T) {
					t.Parallel()
					w := newWorld(t, mode, kind)
					w.intake(deliveries)
					log := w.crash(cp.point, 1)

					first := firstQueueID(w)
					w.checkAtCrash(first, cp.at, log)

					d := w.restart(2)
					if cp.at.write == touba.EffectDispatched {
						w.checkRecovered(d.Log(), effectID(first, stepWrite))
					}
					w.settle(d)
					want := map[string]end{}
					if cp.at.write != "" {
						want[first] = cp.after(mode)
					}
					w.check(want)
				})
			}
		}
	}
}

// firstQueueID is the entry a single worker leases first: the queue leases
// in queue_id order.
func firstQueueID(w *world) string {
	ids := make([]string, 0, len(w.acked))
	for _, qid := range w.acked {
		ids = append(ids, qid)
	}
	sort.Strings(ids)
	return ids[0]
}

// checkAtCrash checks that the crash point fired where its name says:
// the first entry running (or nothing leased), its effects in the expected
// states, no other entry touched, and the remote's count of requests.
func (w *world) checkAtCrash(first string, at atCrash, log string) {
	t := w.t
	t.Helper()
	effects, _ := w.effects()
	for id, e := range effects {
		if e.Scope != first {
			t.Errorf("at the crash, effect %s of another entry exists (%s)", id, e.State)
		}
	}
	states := map[string]string{}
	for _, step := range []string{stepWrite, stepConfirm} {
		states[step] = effects[effectID(first, step)].State
	}
	if got, want := fmt.Sprint(states[stepWrite], "/", states[stepConfirm]), fmt.Sprint(at.write, "/", at.confirm); got != want {
		t.Errorf("at the crash, effects write/confirm are %s, want %s\n%s", got, want, log)
	}
	if got, want := len(w.remoteLines()), at.requests; got != want {
		t.Errorf("at the crash, the remote saw %d requests, want %d: %+v", got, want, w.remoteLines())
	}
	for qid, e := range w.entries() {
		want := touba.StatusPending
		if qid == first && at.write != "" {
			want = touba.StatusRunning
		}
		if e.Status != want {
			t.Errorf("at the crash, entry %s (%s) is %s, want %s", qid, e.EventID, e.Status, want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// checkRecovered checks that start-up recovery reported the dispatched
// effect in the log with the event SPEC §5 names: effect.unknown when the
// retry mode lets the next attempt repeat it, run.needs_reconciliation
// when an operator must decide.
func (w *world) checkRecovered(log, effect string) {
	w.t.Helper()
	want := "run.needs_reconciliation"
	if w.retryMode == touba.RetryIdempotencyKey {
		want = "effect.unknown"
	}
	for _, line := range strings.Split(log, "\n") {
		var m struct {
			Event    string `json:"event"`
			EffectID string `json:"effect_id"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.EffectID == effect && m.Event == want {
			return
		}
	}
	w.t.Errorf("restart log does not report %s with event %s\n%s", effect, want, log)
}
