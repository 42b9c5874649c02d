package dispatcher_test

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// What a test reads of a world's files, waits for, or changes behind the
// dispatcher's back.

// entry returns the queue entry qid.
func (w *world) entry(qid string) *touba.Delivery {
	w.tb.Helper()
	e, err := w.q.Get(context.Background(), qid)
	if err != nil || e == nil {
		w.tb.Fatalf("entry %s: %v, %v", qid, e, err)
	}
	return e
}

// wait returns entry qid once it is in status, or fails the test at the
// deadline with what the entry and its runs looked like.
func (w *world) wait(qid, status string) *touba.Delivery {
	w.tb.Helper()
	var e *touba.Delivery
	reached := false
	defer func() { // the wait failed: say what the entry and its runs looked like
		if !reached && e != nil {
			runs, _ := w.st.Runs(context.Background(), qid)
			w.tb.Logf("entry %s is %s (attempts %d, code %q), want %s; runs so far: %+v", qid, e.Status, e.Attempts, e.ErrorCode, status, runs)
		}
	}()
	testkit.WaitFor(w.tb, waitFor, func() bool {
		e = w.entry(qid)
		// Only a replay, which tests make themselves, moves an entry on
		// from done, failed or parked: another end is final.
		final := e.Status == touba.StatusDone || e.Status == touba.StatusFailed || e.Status == touba.StatusParked
		if e.Status != status && final {
			w.tb.Fatalf("entry %s ended %s, want %s", qid, e.Status, status)
		}
		return e.Status == status
	}, "entry "+qid+" to be "+status)
	reached = true
	return e
}

// until waits for cond, failing the test at the deadline.
func (w *world) until(what string, cond func() bool) {
	w.tb.Helper()
	testkit.WaitFor(w.tb, waitFor, cond, what)
}

// replay puts a failed or parked entry back to pending, as an operator's
// `queue replay` does.
func (w *world) replay(qid string) {
	w.tb.Helper()
	res, err := w.q.Replay(context.Background(), []string{qid}, touba.ReplayOptions{})
	if err != nil {
		w.tb.Fatal(err)
	}
	if len(res) != 1 || res[0].From == "" {
		w.tb.Fatalf("replay %s: %+v", qid, res)
	}
	if w.d != nil {
		w.d.Notify()
	}
}

// effect returns the journaled effect of step stepID of entry qid, or nil.
func (w *world) effect(qid, stepID string) *touba.Effect {
	w.tb.Helper()
	e, err := w.j.Get(context.Background(), qid, qid+":"+stepID)
	if err != nil {
		w.tb.Fatal(err)
	}
	return e
}

// effects returns every journaled effect of entry qid.
func (w *world) effects(qid string) []touba.Effect {
	w.tb.Helper()
	es, err := w.j.List(context.Background(), touba.EffectFilter{Scope: qid})
	if err != nil {
		w.tb.Fatal(err)
	}
	return es
}

// steps returns the checkpointed step outputs of entry qid.
func (w *world) steps(qid string) map[string]touba.StepOutput {
	w.tb.Helper()
	s, err := w.st.Steps(context.Background(), qid)
	if err != nil {
		w.tb.Fatal(err)
	}
	return s
}

// forgetCheckpoint deletes the checkpoint of one step, as if the process
// had died after the journal recorded the outcome and before the state
// file recorded the step: the next run must ask the journal.
func (w *world) forgetCheckpoint(qid, stepID string) {
	w.tb.Helper()
	res, err := w.st.DB().Write.Exec(`DELETE FROM run_steps WHERE queue_id = ? AND step_id = ?`, qid, stepID)
	if err != nil {
		w.tb.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		w.tb.Fatalf("checkpoint %s/%s: %d rows deleted, want 1", qid, stepID, n)
	}
}

// journalSQL runs one statement on the journal file through a connection
// of its own, for rows the journal's API refuses to write.
func (w *world) journalSQL(query string, args ...any) {
	w.tb.Helper()
	db, err := sql.Open("sqlite3", "file:"+w.path("journal.sqlite")+"?_busy_timeout=10000")
	if err != nil {
		w.tb.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(query, args...); err != nil {
		w.tb.Fatalf("journal SQL: %v", err)
	}
}

// waitRuns waits until the run history of entry qid holds n runs (it is
// written after the entry's state, without waiting for its commit) and
// returns them, oldest first.
func (w *world) waitRuns(qid string, n int) []touba.Run {
	w.tb.Helper()
	var rs []touba.Run
	w.until(fmt.Sprintf("%d runs of %s", n, qid), func() bool {
		var err error
		if rs, err = w.st.Runs(context.Background(), qid); err != nil {
			w.tb.Fatal(err)
		}
		return len(rs) >= n
	})
	if len(rs) != n {
		w.tb.Fatalf("entry %s has %d runs, want %d: %+v", qid, len(rs), n, rs)
	}
	return rs
}
