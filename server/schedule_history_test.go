package server_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/schedule"
	"github.com/touba/touba-trigger/sqlite"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// Issue 42 on a real daemon: tick N-1 failed (so --history keeps it),
// tick N ran and --history forgot it; after a restart within the next
// minute, catch_up last enqueues nothing (N was enqueued: the schedule's
// cursor says so), and the next tick comes on time. Before the cursor,
// N-1 was taken for the newest tick and N enqueued again under a new
// queue id: a second run, a second write to the remote.
func TestScheduleTickForgottenByHistoryRunsOnce(t *testing.T) {
	const ref = "trigger:every/Minute"
	d := newSchedDir(t, scheduleProgram("every/Minute", `{"kind":"schedule","cron":"* * * * *","catch_up":"last"}`))
	clock := schedule.NewManual(at("10:00:30"))
	s := d.start(t, clock, 0)
	s.WaitLog("schedule started", 10*time.Second)
	for _, hhmm := range []string{"10:01", "10:02"} {
		clock.Set(at(hhmm + ":00"))
		waitTick(t, d, ref, "2026-12-01T"+hhmm+":00Z")
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return slices.Equal(d.statuses(t, ref), []string{"done", "done"})
	}, "both ticks run")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	// N-1 failed; --history forgets N (done), keeps N-1.
	db, err := sql.Open("sqlite3", "file:"+d.queue+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE entries SET status = 'failed', error_code = 'HandlerFailed' WHERE trigger_ref = ? AND event_id = ?`,
		ref, "2026-12-01T10:01:00Z"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	d.forget(t, time.Now().Add(time.Hour))
	if got, want := d.ticks(t, ref), []string{"2026-12-01T10:01:00Z"}; !slices.Equal(got, want) {
		t.Fatalf("ticks after --history %v, want %v (the failed one kept)", got, want)
	}

	clock = schedule.NewManual(at("10:02:30"))
	s = d.start(t, clock, 0)
	s.WaitLog("schedule started", 10*time.Second)
	clock.Set(at("10:03:00"))
	waitTick(t, d, ref, "2026-12-01T10:03:00Z")
	if got, want := d.ticks(t, ref), []string{"2026-12-01T10:01:00Z", "2026-12-01T10:03:00Z"}; !slices.Equal(got, want) {
		t.Fatalf("ticks after the restart %v, want %v (10:02 ran and was forgotten: not enqueued again)", got, want)
	}
}

// statuses are the states of ref's entries, in event id order.
func (d *schedDir) statuses(t *testing.T, ref string) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+d.queue+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return queryStrings(t, db, `SELECT status FROM entries WHERE trigger_ref = ? ORDER BY event_id`, ref)
}

// forget runs --history passes at before on d's files, no daemon running.
func (d *schedDir) forget(t *testing.T, before time.Time) {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, d.queue, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := state.Open(ctx, filepath.Join(d.dir, "state.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := &sqlite.History{Queue: q, State: st}
	for range 100 {
		r, err := h.Prune(ctx, before)
		if err != nil {
			t.Fatal(err)
		}
		if !r.More {
			return
		}
	}
	t.Fatal("--history passes still had more after 100")
}
