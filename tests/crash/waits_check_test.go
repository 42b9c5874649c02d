package crash_test

import (
	"encoding/json"
	"sort"
	"time"

	touba "github.com/touba/touba-trigger"
)

// orderEnd is what one order must end as once the daemon stopped cleanly.
type orderEnd struct {
	// status is done or cancelled; refunded (status "") allows either: a
	// refund that came after the order completed leaves it done.
	status string
	// paidBy is the event id of the payment its paid wait matched (done
	// orders of a program with a paid step).
	paidBy string
}

// refunded is the end of an order whose refund was sent: done if it
// completed first (its paid wait then matched its payment), else
// cancelled.
func refunded(payment string) orderEnd { return orderEnd{paidBy: payment} }

// checkWaits reads the files after a clean stop and checks the promises
// of durable steps against want (by order event id; every order the test
// sent must be in it) for a world running prog:
//
//   - every acknowledged delivery is in the queue under its queue id, and
//     the queue holds nothing the test did not send;
//   - an order done has each wait step ended once, as it should (nap woke
//     no earlier than its end, paid matched by its own payment), and its
//     write and confirm applied, each written once at the remote, confirm
//     having seen the write's receipt, the nap's woke_at and the payment;
//   - an order cancelled has code RunCancelled and no wait left open;
//   - every other entry (payments, refunds) is done;
//   - no payment matched two waits, no effect was written twice at the
//     remote, and none reached it without its journal record.
func (w *waitWorld) checkWaits(prog waitProg, want map[string]orderEnd) {
	t := w.t
	t.Helper()
	entries := w.liveEntries()
	effects, _ := w.effects()
	writes, requests, inputs := map[string]int{}, map[string]int{}, map[string]json.RawMessage{}
	receipts := map[string]string{}
	for _, l := range w.remoteLines() {
		requests[l.EffectID]++
		if l.Kind == "write" {
			writes[l.EffectID]++
			receipts[l.EffectID] = l.Receipt
		}
		inputs[l.EffectID] = l.Input
	}

	// Nothing acknowledged lost, nothing unknown added.
	byQID := map[string]string{}
	for _, id := range w.events() {
		s := w.delivery(id)
		if s.queueID == "" {
			t.Errorf("%s was never acknowledged: the test must resend it before checking", id)
			continue
		}
		byQID[s.queueID] = id
		e, ok := entries[s.queueID]
		if !ok {
			t.Errorf("acknowledged %s (%s) is not in the queue", id, s.queueID)
			continue
		}
		if e.EventID != id {
			t.Errorf("entry %s is %q, acknowledged as %s", s.queueID, e.EventID, id)
		}
	}
	for qid, e := range entries {
		if _, ok := byQID[qid]; !ok {
			t.Errorf("the queue holds %s (%s, %s), which no acknowledgement named", qid, e.EventID, e.Status)
		}
	}

	var orders []string
	for qid, id := range byQID {
		if w.delivery(id).path == ordersPath {
			orders = append(orders, qid)
		}
	}
	sort.Strings(orders)
	waits := w.waitsOf(orders...)
	matchedBy := map[string]string{} // payment queue id -> order it released

	for qid, id := range byQID {
		e := entries[qid]
		if e == nil {
			continue
		}
		s := w.delivery(id)
		if s.path != ordersPath {
			if e.Status != touba.StatusDone {
				t.Errorf("%s (%s): %s (%s), want done: it has no steps", id, qid, e.Status, e.ErrorCode)
			}
			continue
		}
		x, ok := want[id]
		if !ok {
			t.Errorf("order %s (%s) has no expected end in this test", id, qid)
			continue
		}
		if x.status != "" && e.Status != x.status {
			t.Errorf("order %s (%s): %s (%s), want %s", id, qid, e.Status, e.ErrorCode, x.status)
			continue
		}
		ws := waits[qid]
		for step, wt := range ws {
			if wt.State == touba.WaitOpen {
				t.Errorf("order %s is %s with its wait %s still open", id, e.Status, waitString(wt))
			}
			if wt.State == touba.WaitMatched {
				if other, dup := matchedBy[wt.MatchedQueueID]; dup {
					t.Errorf("payment %s (%s) matched two waits: %s and %s/%s", byQID[wt.MatchedQueueID], wt.MatchedQueueID, other, id, step)
				}
				matchedBy[wt.MatchedQueueID] = id + "/" + step
			}
		}
		wid, cid := effectID(qid, stepWrite), effectID(qid, stepConfirm)
		switch e.Status {
		case touba.StatusDone:
			for _, eid := range []string{wid, cid} {
				if eff := effects[eid]; eff.State != touba.EffectApplied || writes[eid] != 1 {
					t.Errorf("order %s done: effect %s is %q and was written %d times at the remote, want applied and written once",
						id, eid, eff.State, writes[eid])
				}
			}
			var in struct {
				Prev, Woke, Paid string
			}
			if err := json.Unmarshal(inputs[cid], &in); err != nil {
				t.Errorf("order %s: confirm's input %s: %v", id, inputs[cid], err)
			}
			if in.Prev != receipts[wid] {
				t.Errorf("order %s: confirm saw prev %q, want the write's receipt %q", id, in.Prev, receipts[wid])
			}
			if prog.nap != "" {
				w.checkNap(id, ws[stepNap], in.Woke)
			} else if _, ok := ws[stepNap]; ok {
				t.Errorf("order %s has a wait of a nap step its program lacks", id)
			}
			if prog.paid {
				p, ok := ws[stepPaid]
				switch {
				case !ok:
					t.Errorf("order %s done with no wait of step %s", id, stepPaid)
				case p.Kind != touba.WaitEvent || p.State != touba.WaitMatched || p.MatchedQueueID != w.qid(x.paidBy):
					t.Errorf("order %s: wait %s, want an event wait matched by %s (%s)", id, waitString(p), x.paidBy, w.qid(x.paidBy))
				}
				if in.Paid != x.paidBy {
					t.Errorf("order %s: confirm saw payment %q, want %q", id, in.Paid, x.paidBy)
				}
			}
		case touba.StatusCancelled:
			if e.ErrorCode != touba.ERunCancelled {
				t.Errorf("order %s cancelled with code %q, want %s", id, e.ErrorCode, touba.ERunCancelled)
			}
			if x.status == touba.StatusCancelled {
				// Cancelled while it waited: confirm never started.
				if _, ok := effects[cid]; ok || requests[cid] > 0 {
					t.Errorf("order %s cancelled while waiting, yet confirm ran (%s, %d requests)", id, effects[cid].State, requests[cid])
				}
			}
		default:
			t.Errorf("order %s (%s): %s (%s) after a clean stop, want done or cancelled", id, qid, e.Status, e.ErrorCode)
		}
	}

	// The remote's side: no write twice, none unjournaled; with a retry
	// mode that never repeats, no request twice either.
	ids := make([]string, 0, len(requests))
	for id := range requests {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if _, ok := effects[id]; !ok {
			t.Errorf("the remote saw %s, which the journal never recorded", id)
		}
		if writes[id] > 1 {
			t.Errorf("%s written %d times at the remote", id, writes[id])
		}
		if w.retryMode != touba.RetryIdempotencyKey && requests[id] > 1 {
			t.Errorf("%s sent %d times with retry_mode %s, which must never repeat it", id, requests[id], w.retryMode)
		}
	}
	for id, eff := range effects {
		if eff.State == touba.EffectApplied && writes[id] != 1 {
			t.Errorf("effect %s applied in the journal, written %d times at the remote", id, writes[id])
		}
	}
}

// checkNap checks an order's sleep: one wait, woke no earlier than its
// end, and the woke_at confirm saw is that resolution.
func (w *waitWorld) checkNap(order string, nap touba.Wait, woke string) {
	t := w.t
	t.Helper()
	if nap.StepID == "" {
		// A sleep whose end had passed when the step began does not wait.
		if woke == "" {
			t.Errorf("order %s: confirm saw no woke_at of its nap", order)
		}
		return
	}
	if nap.Kind != touba.WaitSleep || nap.State != touba.WaitWoke || nap.WakeAt == nil || nap.ResolvedAt == nil {
		t.Errorf("order %s: nap wait %s, want a sleep that woke", order, waitString(nap))
		return
	}
	if nap.ResolvedAt.Before(nap.WakeAt.Add(-time.Millisecond)) {
		t.Errorf("order %s: nap %s ended before its wake_at", order, waitString(nap))
	}
	at, err := time.Parse(time.RFC3339Nano, woke)
	if err != nil {
		t.Errorf("order %s: confirm saw woke_at %q: %v", order, woke, err)
		return
	}
	if d := at.Sub(*nap.ResolvedAt); d < -time.Second || d > time.Second {
		t.Errorf("order %s: confirm saw woke_at %s, the wait resolved at %s: the step's output is not its one resolution",
			order, woke, touba.FormatTime(*nap.ResolvedAt))
	}
}
