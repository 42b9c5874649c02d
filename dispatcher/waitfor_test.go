package dispatcher_test

import (
	"encoding/json"
	"slices"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// The wait_for programs: trigger:t/order waits at step "paid" for a
// delivery of trigger:t/pay with the same body "order", then calls
// toolThen with the matched body's amount.
const (
	orderTrig = "t/order"
	payTrig   = "t/pay"
)

func orderProgram(tb testing.TB, cf string, timeoutMS int, onTimeout string) string {
	return programOf(tb,
		trig(orderTrig, nil,
			waitStep("paid", payTrig, "order", timeoutMS, onTimeout),
			toolStep("then", toolThen, okInput(cf, ref("/steps/paid/output"))),
		),
		trig(payTrig, nil, toolStep("ack", toolThen, okInput("", nil))),
	)
}

// matchedOutput is the output of a wait_for a delivery matched.
type matchedOutput struct {
	QueueID string            `json:"queue_id"`
	EventID string            `json:"event_id"`
	Headers map[string]string `json:"headers"`
	Body    struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	} `json:"body"`
}

// A wait_for ends when a matching delivery of the awaited trigger is
// accepted, after the wait began (the entry waited) or before it (the
// offer is consumed at once and the run goes on): its output is that
// delivery, and the next step reads it. A delivery with another value
// does not end it.
func TestWaitForMatched(t *testing.T) {
	for _, c := range []struct {
		name    string
		earlier bool
	}{{"later delivery", false}, {"earlier delivery", true}} {
		t.Run(c.name, func(t *testing.T) {
			cf := tmp(t, "calls")
			w := newWorld(t, orderProgram(t, cf, 0, ""), processManifest(t, []string{toolThen}), nil, true)
			w.mustWaits()
			var qid, pay string
			if c.earlier {
				pay = w.post(payTrig, `{"order": "o-1", "amount": 5}`)
				qid = w.post(orderTrig, `{"order": "o-1"}`)
			} else {
				qid = w.post(orderTrig, `{"order": "o-1"}`)
				// Waiting, the entry holds no lease and its attempt was
				// given back.
				wantEntry(t, w.wait(qid, touba.StatusWaiting), touba.StatusWaiting, "", 0)
				w.post(payTrig, `{"order": "o-2", "amount": 7}`)
				if e := w.entry(qid); e.Status != touba.StatusWaiting {
					t.Fatalf("entry %s after another order's payment, want waiting", e.Status)
				}
				pay = w.post(payTrig, `{"order": "o-1", "amount": 5}`)
			}
			wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
			var out matchedOutput
			if err := json.Unmarshal(w.steps(qid)["paid"].Output, &out); err != nil {
				t.Fatal(err)
			}
			if out.QueueID != pay || out.EventID != w.entry(pay).EventID || out.Body.Order != "o-1" || out.Body.Amount != 5 ||
				out.Headers["content-type"] != "application/json" {
				t.Fatalf("paid output %+v, want delivery %s", out, pay)
			}
			cs := calls(t, cf)
			if len(cs) != 1 || !jsonEqual(t, field(t, cs[0].Input, "data"), w.steps(qid)["paid"].Output) {
				t.Fatalf("calls %+v, want one reading the paid output", cs)
			}
			// The match is in the audit trail of both entries.
			for _, id := range []string{qid, pay} {
				evs, err := w.st.OperatorEvents(t.Context(), id, 10)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(evs, func(ev touba.OperatorEvent) bool {
					return ev.Action == "wait.matched" && ev.Outcome == pay
				}) {
					t.Fatalf("audit trail of %s: %+v, want wait.matched by %s", id, evs, pay)
				}
			}
			want := []string{touba.StatusWaiting, touba.StatusDone}
			if c.earlier {
				want = []string{touba.StatusDone}
			}
			if got := w.runStatuses(qid, len(want)); !slices.Equal(got, want) {
				t.Fatalf("runs %v, want %v", got, want)
			}
		})
	}
}

// A wait_for whose timeout comes first fails the run WaitTimedOut under
// on_timeout fail (the default), and goes on with output null under
// continue. The wait spent no attempt.
func TestWaitForTimeout(t *testing.T) {
	for _, c := range []struct {
		onTimeout, status, code string
		calls                   int
	}{
		{"", touba.StatusFailed, touba.EWaitTimedOut, 0},
		{"fail", touba.StatusFailed, touba.EWaitTimedOut, 0},
		{"continue", touba.StatusDone, "", 1},
	} {
		t.Run("on_timeout="+c.onTimeout, func(t *testing.T) {
			cf := tmp(t, "calls")
			w := newWorld(t, orderProgram(t, cf, 200, c.onTimeout), processManifest(t, []string{toolThen}), nil, true)
			w.mustWaits()
			qid := w.post(orderTrig, `{"order": "o-1"}`)
			wantEntry(t, w.wait(qid, c.status), c.status, c.code, 1)
			if cs := calls(t, cf); len(cs) != c.calls {
				t.Fatalf("calls %+v, want %d", cs, c.calls)
			}
			if c.calls == 1 {
				if out := w.steps(qid)["paid"].Output; string(out) != "null" {
					t.Fatalf("paid output %s, want null", out)
				}
			}
			if ws := w.waitsOf(qid); len(ws) != 1 || ws[0].State != touba.WaitTimedOut {
				t.Fatalf("waits %+v, want one timed out", ws)
			}
			// A payment after the timeout is stored for a later wait; this
			// entry stays where it is.
			w.post(payTrig, `{"order": "o-1", "amount": 5}`)
			if e := w.entry(qid); e.Status != c.status {
				t.Fatalf("entry %s after a late payment, want %s", e.Status, c.status)
			}
		})
	}
}
