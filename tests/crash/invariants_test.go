package crash_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// stepEnd is the end of one effect: its journal state ("" for never
// journaled), its journal attempts, and how many requests for it reached
// the remote.
type stepEnd struct {
	state    string
	attempts int
	requests int
}

// end is the end of one entry after the crash and the restart: its status
// and its effects, in step order (write, confirm).
type end struct {
	status string
	steps  [2]stepEnd
}

// stepIDs are the steps of program, in order.
var stepIDs = [2]string{stepWrite, stepConfirm}

// once is an effect applied by its first and only request.
var once = stepEnd{touba.EffectApplied, 1, 1}

// plain is the end of an entry the crash did not touch.
var plain = end{touba.StatusDone, [2]stepEnd{once, once}}

// doneAfter is the end of an entry done after its write effect took
// attempts journal attempts and requests requests at the remote.
func doneAfter(requests, attempts int) end {
	return end{touba.StatusDone, [2]stepEnd{{touba.EffectApplied, attempts, requests}, once}}
}

// parkedAfter is the end of an entry parked at its write effect, whose
// outcome was lost after requests requests reached the remote.
func parkedAfter(requests int) end {
	return end{touba.StatusParked, [2]stepEnd{{touba.EffectUnknown, 1, requests}, {}}}
}

// parkCode is the code of an entry parked for an unknown effect (SPEC §5).
func parkCode(retryMode string) string {
	if retryMode == touba.RetryReconcile {
		return touba.EEffectReconciliationRequired
	}
	return touba.EEffectOutcomeUnknown
}

// check reads the queue, the journal and the remote after the daemon's
// clean stop and asserts the invariants of SPEC §3.2 and §5, with want
// naming the entries whose end the crash changed (the others are plain).
func (w *world) check(want map[string]end) {
	t := w.t
	t.Helper()
	entries := w.entries()
	effects, events := w.effects()
	lines := w.remoteLines()

	byEffect := map[string][]remoteLine{}
	for _, l := range lines {
		byEffect[l.EffectID] = append(byEffect[l.EffectID], l)
	}
	writes := func(id string) []remoteLine {
		var out []remoteLine
		for _, l := range byEffect[id] {
			if l.Kind == "write" {
				out = append(out, l)
			}
		}
		return out
	}

	// Nothing acknowledged is lost, and nothing is left pending or running.
	if got, want := len(entries), len(w.acked); got != want {
		t.Errorf("queue holds %d entries, want the %d acknowledged", got, want)
	}
	for _, ev := range w.order {
		qid := w.acked[ev]
		e, ok := entries[qid]
		if !ok {
			t.Errorf("acknowledged %s (%s) is not in the queue", ev, qid)
			continue
		}
		x, crashed := want[qid]
		if !crashed {
			x = plain
		}
		switch e.Status {
		case touba.StatusDone:
		case touba.StatusParked:
			if w.retryMode == touba.RetryIdempotencyKey {
				t.Errorf("%s: parked (%s) although the remote deduplicates", ev, e.ErrorCode)
			}
			if got, want := e.ErrorCode, parkCode(w.retryMode); got != want {
				t.Errorf("%s: parked with %q, want %q", ev, got, want)
			}
		default:
			t.Errorf("%s (%s): status %s (%s) after a clean stop, want done or parked", ev, qid, e.Status, e.ErrorCode)
		}
		if e.Status != x.status {
			t.Errorf("%s (%s): status %s (%s), want %s", ev, qid, e.Status, e.ErrorCode, x.status)
			continue
		}
		for i, step := range stepIDs {
			id, s := effectID(qid, step), x.steps[i]
			eff, journaled := effects[id]
			if s.state == "" {
				if journaled || len(byEffect[id]) > 0 {
					t.Errorf("%s: step %s ran (%s, %d requests) after the run stopped before it", ev, step, eff.State, len(byEffect[id]))
				}
				continue
			}
			if e.Status == touba.StatusDone && eff.State != touba.EffectApplied {
				t.Errorf("%s: done, but journal says %s is %q", ev, id, eff.State)
			}
			if got := fmt.Sprint(eff.State, " attempts=", eff.Attempts); got != fmt.Sprint(s.state, " attempts=", s.attempts) {
				t.Errorf("%s: journal has %s %s, want %s attempts=%d", ev, id, got, s.state, s.attempts)
			}
			if got := len(byEffect[id]); got != s.requests {
				t.Errorf("%s: the remote saw %d requests for %s, want %d: %v", ev, got, id, s.requests, byEffect[id])
			}
			if eff.State != touba.EffectApplied {
				continue
			}
			ws := writes(id)
			if len(ws) != 1 {
				t.Errorf("%s: %s is applied and was written %d times at the remote, want exactly once: %v", ev, id, len(ws), byEffect[id])
				continue
			}
			if eff.ReceiptRef != ws[0].Receipt {
				t.Errorf("%s: journal receipt of %s is %q, the remote's %q", ev, id, eff.ReceiptRef, ws[0].Receipt)
			}
			var res struct{ Receipt string }
			if err := json.Unmarshal(eff.Result, &res); err != nil || res.Receipt != ws[0].Receipt {
				t.Errorf("%s: stored result of %s is %s, want the remote's receipt %q (%v)", ev, id, eff.Result, ws[0].Receipt, err)
			}
		}
		// The second step saw the first one's output, restored from the
		// journal when the crash came after its outcome.
		if ws, cs := writes(effectID(qid, stepWrite)), byEffect[effectID(qid, stepConfirm)]; len(ws) == 1 {
			for _, c := range cs {
				var in struct{ Prev string }
				if err := json.Unmarshal(c.Input, &in); err != nil || in.Prev != ws[0].Receipt {
					t.Errorf("%s: step %s got prev %q, want the receipt %q of step %s (%v)", ev, stepConfirm, in.Prev, ws[0].Receipt, stepWrite, err)
				}
			}
		}
	}

	// The remote's side: an idempotency key makes a repeat no new write;
	// without one, nothing is ever sent twice. Every request that reached
	// the remote was journaled before it left.
	ids := make([]string, 0, len(byEffect))
	for id := range byEffect {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if _, ok := effects[id]; !ok {
			t.Errorf("the remote saw %s, which the journal never recorded", id)
		}
		if n := len(writes(id)); n > 1 {
			t.Errorf("%s written %d times at the remote", id, n)
		}
		if n := len(byEffect[id]); w.retryMode != touba.RetryIdempotencyKey && n > 1 {
			t.Errorf("%s sent %d times with retry_mode %s, which must never repeat it", id, n, w.retryMode)
		}
	}

	// The journal: every effect ended applied or unknown, and none ever
	// left applied.
	for id, eff := range effects {
		if eff.State != touba.EffectApplied && eff.State != touba.EffectUnknown {
			t.Errorf("effect %s ended %q after a clean stop", id, eff.State)
		}
		checkEvents(w, id, events[id])
	}
}

// checkEvents asserts the audit trail of one effect: it starts prepared,
// an unknown after dispatched is the recovery's, and after an applied
// event there is no other state event.
func checkEvents(w *world, id string, evs []touba.EffectEvent) {
	w.t.Helper()
	if len(evs) == 0 || evs[0].State != touba.EffectPrepared {
		w.t.Errorf("effect %s: audit trail %+v does not start prepared", id, evs)
	}
	for i, e := range evs {
		// The remote always answers applied, so in these tests only
		// start-up recovery (or a take-over) may turn a dispatched effect
		// unknown.
		if e.State == touba.EffectUnknown && i > 0 && evs[i-1].State == touba.EffectDispatched {
			want := "run.needs_reconciliation"
			if w.retryMode == touba.RetryIdempotencyKey {
				want = "effect.unknown"
			}
			prefix := journal.RecoveryDetail
			if w.db != "" {
				// On PostgreSQL the surviving node takes the entry over
				// (SPEC §8), naming the node whose lease expired.
				prefix = "take-over by node " + survivor + ": the lease of node " + crashed + " expired"
			}
			if !strings.HasPrefix(e.Detail, prefix) || !strings.Contains(e.Detail, want) {
				w.t.Errorf("effect %s: unknown after dispatched without the audit detail %q naming %s: %q", id, prefix, want, e.Detail)
			}
		}
		if e.State != touba.EffectApplied {
			continue
		}
		if rest := evs[i+1:]; len(rest) > 0 {
			w.t.Errorf("effect %s left applied: events after it %+v", id, rest)
		}
		return
	}
}
