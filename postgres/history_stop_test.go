package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// pendingEntries accepts n deliveries and leaves them pending: a pass
// keeps them (moved to the kept partitions) until they finish.
func pendingEntries(t testing.TB, st *Store, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		body := fmt.Sprintf(`{"n":%d}`, i)
		r, err := st.Queue.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("%s-%d", prefix, i),
			Digest: "d" + body, Body: []byte(body), RemoteAddr: "192.0.2.1:1"})
		if err != nil || !r.Created {
			t.Fatalf("enqueue: %+v, %v", r, err)
		}
		ids = append(ids, r.QueueID)
	}
	return ids
}

// runPending leases the n pending entries and runs each to done with a
// checkpoint, a run and an applied effect, as ranEntries does.
func runPending(t testing.TB, st *Store, n int) {
	t.Helper()
	ctx := context.Background()
	var leased []*touba.Delivery
	for len(leased) < n {
		got, err := st.Queue.Lease(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		leased = append(leased, got...)
	}
	for _, d := range leased {
		id := d.QueueID
		if err := st.State.SaveStep(id, d.LeaseToken, "s1", "run-"+id, json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
		now := st.db.cfg.Now()
		st.State.RecordRun(&touba.Run{RunID: "run-" + id, QueueID: id, TriggerRef: "trigger:t", Attempt: 1, Status: touba.StatusDone,
			StartedAt: now, EndedAt: &now})
		p := touba.EffectPrepare{Scope: id, EffectID: id + ":s1", ToolRef: "tool:t", Operation: touba.OperationInvoke,
			Fingerprint: "sha256:00", RetryMode: touba.RetryIdempotencyKey, CallID: "c" + id, LeaseToken: d.LeaseToken}
		if _, err := st.Journal.Prepare(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := st.Journal.Dispatch(ctx, id, id+":s1", "c"+id); err != nil {
			t.Fatal(err)
		}
		if err := st.Journal.Finish(ctx, touba.EffectOutcome{Scope: id, EffectID: id + ":s1", CallID: "c" + id,
			State: touba.EffectApplied, ReceiptRef: "r", Result: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if err := st.Queue.Finish(ctx, id, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.State.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// passWorld is a database on which one pass reaches every point of the
// pass: a range past the window holding done, failed and parked entries,
// and kept entries (of an earlier range, forgotten by an earlier pass)
// that finished since.
type passWorld struct {
	url                        string
	clk                        *testClock
	window                     time.Duration
	done, failed, parked, late []string
}

func newPassWorld(t *testing.T) *passWorld {
	t.Helper()
	ctx := context.Background()
	w := &passWorld{url: pgtest.New(t), clk: &testClock{t: time.Now()}, window: 80 * time.Second}
	st := openNode(t, w.url, "n1", w.clk, w.window)
	ranEntries(t, st, "first", 5, touba.StatusDone)
	w.late = pendingEntries(t, st, "late", 5)
	w.clk.Add(3 * w.window)
	prune(t, st, w.clk.Now().Add(-w.window))
	for _, id := range w.late {
		if d, err := st.Queue.Get(ctx, id); err != nil || d == nil {
			t.Fatalf("pending entry %s after a pass: %+v (%v), want it kept", id, d, err)
		}
	}
	runPending(t, st, len(w.late))
	w.done = ranEntries(t, st, "done", 20, touba.StatusDone)
	w.failed = ranEntries(t, st, "failed", 2, touba.StatusFailed)
	w.parked = ranEntries(t, st, "parked", 2, touba.StatusParked)
	w.clk.Add(3 * w.window)
	st.Close()
	return w
}

// prune runs passes on st until one leaves nothing more.
func prune(t testing.TB, st *Store, before time.Time) {
	t.Helper()
	for i := 0; ; i++ {
		rep, err := st.History().Prune(context.Background(), before)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.More {
			return
		}
		if i == 10 {
			t.Fatalf("still more after 10 passes: %+v", rep)
		}
	}
}

// child starts the test binary as a node running one pass on w's database
// with crashpoint armed (its stderr in log).
func (w *passWorld) child(t *testing.T, armed string, log *bytes.Buffer) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), historyChildEnv+"="+w.url, crashpoint.Env+"="+armed,
		fmt.Sprint("TOUBA_PG_HISTORY_NOW=", w.clk.Now().UnixMilli()), "TOUBA_PG_HISTORY_WINDOW="+w.window.String())
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
	})
	return cmd
}

// whole fails t unless the failed and parked entries are listed whole,
// and nothing half-forgotten, no detached table and no partition left
// detaching is left.
func (w *passWorld) whole(t *testing.T, st *Store, when string) {
	t.Helper()
	wantListed(t, st, touba.StatusFailed, w.failed)
	wantListed(t, st, touba.StatusParked, w.parked)
	noOrphans(t, st)
	conn := superConn(t, w.url)
	if h := halfForgotten(t, conn); len(h) > 0 {
		t.Fatalf("%s, rows whose entry is gone: %v", when, h)
	}
}

// forgotten fails t unless every entry of ids is gone.
func forgotten(t *testing.T, st *Store, ids []string, what string) {
	t.Helper()
	for _, id := range ids {
		if d, err := st.Queue.Get(context.Background(), id); err != nil || d != nil {
			t.Fatalf("%s entry %s: %+v (%v), want it forgotten", what, id, d, err)
		}
	}
}

// noneLeft fails t when a partition is left marked as being forgotten, or
// detaching.
func noneLeft(t *testing.T, url string) {
	t.Helper()
	conn := superConn(t, url)
	if n := count(t, conn, `SELECT count(*) FROM pg_class c WHERE obj_description(c.oid, 'pg_class') = $1`, forgettingMark); n != 0 {
		t.Fatalf("%d partitions marked as being forgotten are left", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM pg_inherits WHERE inhdetachpending`); n != 0 {
		t.Fatalf("%d partitions left detaching", n)
	}
}

// SPEC §8.1: a node killed (SIGKILL) just after it forgot a batch of kept
// entries that finished (CrashAfterKept, after the commit) leaves them
// wholly forgotten, nothing half-forgotten, and the failed and parked
// entries whole; the next pass, on another node, ends the work.
func TestKilledAfterKept(t *testing.T) {
	w := newPassWorld(t)
	var log bytes.Buffer
	cmd := w.child(t, CrashAfterKept, &log)
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v (%v), want killed at %s\n%s", cmd.ProcessState, err, CrashAfterKept, log.String())
	}
	st := openNode(t, w.url, "n2", w.clk, w.window)
	w.whole(t, st, "after a kill at "+CrashAfterKept)
	forgotten(t, st, w.late, "finished kept")
	forgotten(t, st, w.done, "done")
	prune(t, st, w.clk.Now().Add(-w.window))
	w.whole(t, st, "after the next pass")
	noneLeft(t, w.url)
}

// stoppedState reads the state letter of process pid (T: stopped).
func stoppedState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) S ...: the comm may hold spaces, the state follows its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// waitStopped waits until cmd, armed with "stop:"+point, is stopped there
// (exited tells of its end, log holds its stderr).
func waitStopped(t *testing.T, cmd *exec.Cmd, exited <-chan error, log *bytes.Buffer, point string) {
	t.Helper()
	waitFor(t, 60*time.Second, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("child exited (%v) before stopping at %s\n%s", err, point, log.String())
		default:
		}
		return stoppedState(cmd.Process.Pid) == 'T'
	}, "the child to stop at "+point)
}

// SPEC §8.1: a node frozen (SIGSTOP) at each point of a pass, its
// connections open, while a second node accepts and runs entries and
// runs passes: the second node's passes end the work (the range's
// partitions dropped, the finished kept entries forgotten) with nothing
// lost, half-forgotten or left detached; when the frozen node goes on
// (SIGCONT) its pass, finding its work done by the other, ends without
// an error and loses nothing either, and the next pass leaves nothing
// marked or detaching.
func TestStoppedMidPass(t *testing.T) {
	for _, point := range []string{CrashAfterFreeze, CrashMidDetach, CrashAfterDetach, CrashAfterKept} {
		t.Run(point, func(t *testing.T) {
			w := newPassWorld(t)
			var log bytes.Buffer
			cmd := w.child(t, "stop:"+point, &log)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			waitStopped(t, cmd, exited, &log, point)

			st := openNode(t, w.url, "n2", w.clk, w.window)
			during := ranEntries(t, st, "during", 5, touba.StatusDone)
			duringParked := ranEntries(t, st, "during-parked", 1, touba.StatusParked)
			prune(t, st, w.clk.Now().Add(-w.window))
			w.whole(t, st, "with a node stopped at "+point+" and the other's passes")
			forgotten(t, st, w.done, "done")
			forgotten(t, st, w.late, "finished kept")
			wantListed(t, st, touba.StatusDone, during)
			noneLeft(t, w.url)

			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				// 3: the pass ended (historyChild), with or without an error.
				if code := cmd.ProcessState.ExitCode(); code != 3 {
					t.Fatalf("child after SIGCONT: %v (%v), want its pass ended\n%s", cmd.ProcessState, err, log.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("child still running 60s after SIGCONT\n%s", log.String())
			}
			// Its work was done by the other node meanwhile: the partitions
			// it listed are gone, which is no failure of the pass.
			if got := strings.TrimSpace(log.String()); !strings.HasSuffix(got, "without its crash point: <nil>") {
				t.Fatalf("the stopped node's pass, continued, failed: %s", got)
			}
			w.whole(t, st, "after the stopped node went on")
			wantListed(t, st, touba.StatusDone, during)
			wantListed(t, st, touba.StatusParked, duringParked)
			prune(t, st, w.clk.Now().Add(-w.window))
			w.whole(t, st, "after the next pass")
			wantListed(t, st, touba.StatusDone, during)
			noneLeft(t, w.url)
		})
	}
}
