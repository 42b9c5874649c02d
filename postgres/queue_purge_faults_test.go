package postgres

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// purgeWorld is a database with marks for every half hour, entries that
// ended at known times, and a first (full) retention pass recorded.
type purgeWorld struct {
	url   string
	clk   *testClock
	st    *Store
	conn  *pgx.Conn
	ended map[string]time.Time
	first time.Time // the first pass's cutoff
}

const purgeRetention = 2 * time.Hour

func newPurgeWorld(t *testing.T) *purgeWorld {
	t.Helper()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now().Add(-48 * time.Hour).Truncate(time.Hour)}
	w := &purgeWorld{url: url, clk: clk, st: openNode(t, url, "n1", clk, 80*time.Second), conn: superConn(t, url),
		ended: map[string]time.Time{}}
	w.tick(t, 5*time.Hour)
	w.end(t, "a", 4)
	w.tick(t, 3*time.Hour)
	w.first = w.cutoff()
	w.pass(t, w.first)
	w.end(t, "b", 4)
	w.tick(t, time.Hour)
	w.end(t, "c", 4)
	// No pass for hours: the next pass's range (from the first's cutoff)
	// is wide, a range from its own cutoff would no longer hold b or c.
	w.tick(t, 8*time.Hour)
	return w
}

// tick moves the clock by d, the node raising its floor every half hour.
func (w *purgeWorld) tick(t *testing.T, d time.Duration) {
	t.Helper()
	for end := w.clk.Now().Add(d); w.clk.Now().Before(end); {
		w.clk.Add(30 * time.Minute)
		if err := w.st.Queue.raiseFloor(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *purgeWorld) end(t *testing.T, prefix string, n int) {
	t.Helper()
	for _, id := range ranEntries(t, w.st, prefix, n, touba.StatusDone) {
		w.ended[id] = w.clk.Now()
	}
}

func (w *purgeWorld) cutoff() time.Time { return w.clk.Now().Add(-purgeRetention) }

func (w *purgeWorld) pass(t *testing.T, cutoff time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := w.st.Queue.purgePass(ctx, cutoff); err != nil {
		t.Fatalf("pass: %v", err)
	}
}

// due is the newest entry a pass with cutoff must purge.
func (w *purgeWorld) due(t *testing.T, cutoff time.Time) string {
	t.Helper()
	var ids []string
	for id, at := range w.ended {
		if at.Before(cutoff) && !purged(t, w.conn, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Fatal("no entry due")
	}
	sort.Strings(ids)
	return ids[len(ids)-1]
}

// check fails t unless exactly the bodies done before cutoff, but those
// in still, are gone.
func (w *purgeWorld) check(t *testing.T, cutoff time.Time, when string, still ...string) {
	t.Helper()
	for id, at := range w.ended {
		gone := purged(t, w.conn, id)
		kept := false
		for _, s := range still {
			kept = kept || s == id
		}
		switch {
		case !at.Before(cutoff) && gone:
			t.Fatalf("%s: %s, done at %s, purged (cutoff %s)", when, id, at, cutoff)
		case at.Before(cutoff) && !gone && !kept:
			t.Fatalf("%s: %s, done at %s, outlived a pass with cutoff %s", when, id, at, cutoff)
		case kept && gone:
			t.Fatalf("%s: %s purged while another held it", when, id)
		}
	}
}

// sixHoursOn moves the clock six hours on and checks that a bounded pass
// then leaves nothing due.
func (w *purgeWorld) sixHoursOn(t *testing.T) {
	t.Helper()
	w.tick(t, 6*time.Hour)
	next := w.cutoff()
	if r, err := w.st.Queue.purgeRangeFor(context.Background(), next, w.clk.Now()); err != nil || r.full {
		t.Fatalf("the next pass's range %+v (%v): want a bounded one", r, err)
	}
	w.pass(t, next)
	w.check(t, next, "after the next pass")
}

// child runs a retention pass with cutoff in a node of its own (the test
// binary, main_test.go), its crash point armed; its --database-timeout is
// long enough that the server does not end a frozen child's transaction
// (idle_in_transaction_session_timeout) during the test.
func (w *purgeWorld) child(t *testing.T, armed string, cutoff time.Time, log *bytes.Buffer) (*exec.Cmd, chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), historyChildEnv+"="+w.url, crashpoint.Env+"="+armed,
		fmt.Sprint(purgeChildEnv, "=", cutoff.UnixMilli()), fmt.Sprint("TOUBA_PG_HISTORY_NOW=", w.clk.Now().UnixMilli()),
		"TOUBA_PG_HISTORY_WINDOW=80s", "TOUBA_PG_CHILD_TIMEOUT=3m")
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
	})
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd, exited
}

// A node killed (SIGKILL) in a retention pass, in a chunk's transaction or
// after its chunks but before the pass is recorded, while a peer holds one
// of the bodies it must purge: nothing within --retention is purged, and a
// bounded pass six hours later purges every body due, the held one
// included: the killed pass recorded nothing, so the next one reads from
// the last recorded pass on (had the killed one recorded its cutoff and
// not what it left, the held entry would be below the range by then).
func TestRetentionPassKilled(t *testing.T) {
	for _, point := range []string{CrashPurgeInChunk, CrashPurgeBeforeRecord} {
		t.Run(point, func(t *testing.T) {
			w := newPurgeWorld(t)
			cutoff := w.cutoff()
			held := w.due(t, cutoff)
			holder := superConn(t, w.url)
			mustExec(t, holder, `BEGIN`)
			mustExec(t, holder, `SELECT 1 FROM touba.entries WHERE queue_id = $1 FOR UPDATE`, held)
			var log bytes.Buffer
			cmd, exited := w.child(t, point, cutoff, &log)
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("the child's pass did not reach %s\n%s", point, log.String())
			}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want killed at %s\n%s", cmd.ProcessState, point, log.String())
			}
			mustExec(t, holder, `ROLLBACK`)
			if point == CrashPurgeInChunk {
				w.check(t, w.first, "after a kill in the pass's first chunk")
			} else {
				w.check(t, cutoff, "after a kill before the pass was recorded", held)
			}
			var recorded string
			if err := w.conn.QueryRow(context.Background(), `SELECT cutoff FROM touba.purge_state`).Scan(&recorded); err != nil || recorded != touba.FormatTime(w.first) {
				t.Fatalf("after the kill, the recorded cutoff is %q (%v), want the first pass's %s", recorded, err, touba.FormatTime(w.first))
			}
			w.sixHoursOn(t)
		})
	}
}

// A node frozen (SIGSTOP) in a retention pass, its connections open: in a
// chunk's transaction (the bodies it cleared are locked, not yet gone), or
// after its chunks but before the pass is recorded. The other node's
// passes go on meanwhile without waiting for it, purge what it does not
// hold and nothing within --retention; when the frozen node goes on
// (SIGCONT) its pass ends without an error, its recording lands after the
// other's, and a bounded pass six hours later leaves nothing due.
func TestRetentionPassStopped(t *testing.T) {
	for _, point := range []string{CrashPurgeInChunk, CrashPurgeBeforeRecord} {
		t.Run(point, func(t *testing.T) {
			ctx := context.Background()
			w := newPurgeWorld(t)
			cutoff := w.cutoff()
			var due []string
			for id, at := range w.ended {
				if at.Before(cutoff) && !purged(t, w.conn, id) {
					due = append(due, id)
				}
			}
			var log bytes.Buffer
			cmd, exited := w.child(t, "stop:"+point, cutoff, &log)
			waitStopped(t, cmd, exited, &log, point)

			w.end(t, "during", 2)
			w.tick(t, time.Hour)
			later := w.cutoff()
			w.pass(t, later)
			if point == CrashPurgeInChunk {
				w.check(t, later, "with a node stopped in a chunk holding every body due", due...)
			} else {
				w.check(t, later, "with a node stopped before recording its pass")
			}
			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			select {
			case <-exited:
				if code := cmd.ProcessState.ExitCode(); code != 3 || !bytes.HasSuffix(bytes.TrimSpace(log.Bytes()), []byte("without its crash point: <nil>")) {
					t.Fatalf("child after SIGCONT: %v, want its pass ended without an error\n%s", cmd.ProcessState, log.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("child still running 60s after SIGCONT\n%s", log.String())
			}
			w.check(t, later, "after the stopped node went on")
			var recorded string
			if err := w.conn.QueryRow(ctx, `SELECT cutoff FROM touba.purge_state`).Scan(&recorded); err != nil || recorded != touba.FormatTime(cutoff) {
				t.Fatalf("the pass recorded last: cutoff %q (%v), want the stopped node's %s", recorded, err, touba.FormatTime(cutoff))
			}
			w.sixHoursOn(t)
		})
	}
}
