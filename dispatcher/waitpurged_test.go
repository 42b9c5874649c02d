package dispatcher_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// queueSQL runs one statement on the queue file through a connection of
// its own, for rows the queue's API no longer writes (a body purged under
// an earlier release's --retention, which did not keep matched ones).
func (w *world) queueSQL(query string, args ...any) {
	w.tb.Helper()
	db, err := sql.Open("sqlite3", "file:"+w.path("queue.sqlite")+"?_busy_timeout=10000")
	if err != nil {
		w.tb.Fatal(err)
	}
	defer db.Close()
	if res, err := db.Exec(query, args...); err != nil {
		w.tb.Fatalf("queue SQL: %v", err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		w.tb.Fatalf("queue SQL %q: %d rows, want 1", query, n)
	}
}

// A wait_for whose matched delivery lost its body (purged by retention)
// or left the queue before the waiting entry read it fails the run
// WaitMatchPurged, and the next step does not run with an empty delivery
// (issue 42).
func TestWaitForMatchPurged(t *testing.T) {
	for _, c := range []struct{ name, query string }{
		{"body purged", `UPDATE entries SET body = NULL, headers = '{}' WHERE queue_id = ?`},
		{"entry gone", `DELETE FROM entries WHERE queue_id = ?`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cf := tmp(t, "calls")
			w := newWorld(t, orderProgram(t, cf, 0, ""), processManifest(t, []string{toolThen}), nil, true)
			w.mustWaits()
			pay := w.post(payTrig, `{"order": "o-1", "amount": 5}`)
			w.wait(pay, touba.StatusDone)
			w.queueSQL(c.query, pay)
			qid := w.post(orderTrig, `{"order": "o-1"}`)
			wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EWaitMatchPurged, 1)
			if ws := w.waitsOf(qid); len(ws) != 1 || ws[0].State != touba.WaitMatched || ws[0].MatchedQueueID != pay {
				t.Fatalf("waits %+v, want one matched by %s", ws, pay)
			}
			if _, ok := w.steps(qid)["paid"]; ok {
				t.Fatalf("step paid has an output: %s", w.steps(qid)["paid"].Output)
			}
			if cs := calls(t, cf); len(cs) != 0 {
				t.Fatalf("calls %+v: the step after the wait ran", cs)
			}
			if c.name != "body purged" {
				return
			}
			// A purge takes the delivery's offers with its body; resumed
			// from the wait, the entry waits for a new delivery.
			w.queueSQL(`DELETE FROM offers WHERE queue_id = ?`, pay)
			ctx := context.Background()
			if _, err := w.mustWaits().Resume(ctx, touba.ResumeRequest{QueueID: qid, Steps: []string{"paid", "then"}}); err != nil {
				t.Fatal(err)
			}
			w.d.Notify()
			w.wait(qid, touba.StatusWaiting)
			again := w.post(payTrig, `{"order": "o-1", "amount": 6}`)
			w.wait(qid, touba.StatusDone)
			var out matchedOutput
			if err := json.Unmarshal(w.steps(qid)["paid"].Output, &out); err != nil {
				t.Fatal(err)
			}
			if out.QueueID != again || out.Body.Amount != 6 {
				t.Fatalf("paid output after the resume %+v, want delivery %s", out, again)
			}
		})
	}
}

// A matched delivery whose body was empty when accepted is no purged one:
// the wait's output has the body "" and the run goes on.
func TestWaitForMatchedEmptyBody(t *testing.T) {
	cf := tmp(t, "calls")
	paid := map[string]any{"id": "paid", "wait_for": map[string]any{"trigger": "trigger:" + payTrig,
		"match": ref("/event/body/order"), "on": "/headers/x-order"}}
	w := newWorld(t, programOf(t,
		trig(orderTrig, nil, paid, toolStep("then", toolThen, okInput(cf, ref("/steps/paid/output")))),
		trig(payTrig, nil, toolStep("ack", toolThen, okInput("", nil))),
	), processManifest(t, []string{toolThen}), nil, true)
	w.mustWaits()
	pay := w.postWith(payTrig, "", map[string]string{"X-Order": "o-1", "Content-Type": "text/plain"})
	w.wait(pay, touba.StatusDone)
	qid := w.post(orderTrig, `{"order": "o-1"}`)
	wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
	var out struct {
		QueueID string            `json:"queue_id"`
		Headers map[string]string `json:"headers"`
		Body    any               `json:"body"`
	}
	if err := json.Unmarshal(w.steps(qid)["paid"].Output, &out); err != nil {
		t.Fatal(err)
	}
	if out.QueueID != pay || out.Body != "" || out.Headers["x-order"] != "o-1" {
		t.Fatalf("paid output %s, want delivery %s with body \"\"", w.steps(qid)["paid"].Output, pay)
	}
}
