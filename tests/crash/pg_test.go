package crash_test

import (
	"context"
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
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/postgres"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// On PostgreSQL (SPEC §8) a node that dies is not restarted on its files:
// another node, running all along, takes its entries over once their lease
// expires. pgLeaseTTL is short so that the tests wait little, and the
// binding's timeout (pgTimeoutMS) small enough for serve's check (the
// timeout plus 5s).
const (
	pgLeaseTTL  = 7 * time.Second
	pgTimeoutMS = 2000
	crashed     = "node-a" // the node killed (or frozen)
	survivor    = "node-b" // the node that takes over
)

// pgWait bounds the waits of these tests: a take-over comes after
// pgLeaseTTL, on a loaded machine under -race.
const pgWait = 90 * time.Second

// newPGWorld is newWorld on a fresh database shared by the nodes, with
// the binding's timeout cut to pgTimeoutMS.
func newPGWorld(t *testing.T, retryMode, kind string) *world {
	t.Helper()
	w := newWorld(t, retryMode, kind)
	w.db = pgtest.New(t)
	m := strings.Replace(manifestFor(remoteBin, w.remote, retryMode, kind), `"timeout_ms": 30000`,
		fmt.Sprintf(`"timeout_ms": %d`, pgTimeoutMS), 1)
	if err := os.WriteFile(w.manifest, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// pgStore opens the database as an onlooker: no recovery, no requeue.
func (w *world) pgStore() *postgres.Store {
	w.t.Helper()
	st, err := postgres.Open(context.Background(), postgres.Config{URL: w.db, NodeID: "test-reader", MaxConns: 2})
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

func (w *world) pgEntries() map[string]entry {
	w.t.Helper()
	st := w.pgStore()
	defer st.Close()
	all, err := st.Queue.List(context.Background(), touba.EntryFilter{Limit: 1 << 30})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]entry{}
	for _, e := range all {
		out[e.QueueID] = entry{EventID: e.EventID, Status: e.Status, ErrorCode: e.ErrorCode, LeaseOwner: e.LeaseOwner}
	}
	return out
}

func (w *world) pgEffects() (map[string]touba.Effect, map[string][]touba.EffectEvent) {
	w.t.Helper()
	st := w.pgStore()
	defer st.Close()
	ctx := context.Background()
	all, err := st.Journal.List(ctx, touba.EffectFilter{})
	if err != nil {
		w.t.Fatal(err)
	}
	effects, events := map[string]touba.Effect{}, map[string][]touba.EffectEvent{}
	for _, e := range all {
		effects[e.EffectID] = e
		if events[e.EffectID], err = st.Journal.Events(ctx, e.Scope, e.EffectID); err != nil {
			w.t.Fatal(err)
		}
	}
	return effects, events
}

// leasedBy is the queue id of the entry node holds running, or "".
func (w *world) leasedBy(node string) string {
	for qid, e := range w.entries() {
		if e.Status == touba.StatusRunning && e.LeaseOwner == node {
			return qid
		}
	}
	return ""
}

// settled waits until no acknowledged entry is pending or running: the
// survivor ran them all, the taken-over one included.
func (w *world) settled() {
	w.t.Helper()
	testkit.WaitFor(w.t, pgWait, func() bool {
		entries := w.entries()
		for _, qid := range w.acked {
			if st := entries[qid].Status; st == touba.StatusPending || st == touba.StatusRunning {
				return false
			}
		}
		return true
	}, "every acknowledged entry run to its end")
}

// TestCrashPointsTakeOver is TestCrashPoints on PostgreSQL with two nodes
// (one-shot handlers): an intake-only node acknowledges 5 deliveries; node
// A, one worker, runs with the crash point armed; once A holds an entry,
// node B starts and runs the others; A SIGKILLs itself at the crash
// point; B takes A's entry over when its lease expires, turning its
// dispatched effect unknown with an event naming A, and §5's table
// applies. Then the invariants: nothing acknowledged lost, idempotency_key
// writes applied once at the deduplicating remote, reconcile and none
// never sent twice.
func TestCrashPointsTakeOver(t *testing.T) {
	if ok, why := pgtest.Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	for _, cp := range crashPoints {
		if cp.point == journal.CrashBeforeCommit || cp.point == journal.CrashAfterCommit {
			continue // the SQLite journal's own crash points
		}
		for _, mode := range retryModes {
			t.Run(cp.point+"/"+mode, func(t *testing.T) {
				t.Parallel()
				w := newPGWorld(t, mode, oneShotKind)
				w.intake(deliveries)

				a := exec.Command(testkit.Binary(t), w.args("--workers", "1", "--node-id", crashed)...)
				a.Env = append(os.Environ(), crashpoint.Env+"="+cp.point)
				var alog syncBuffer
				a.Stdout, a.Stderr = &alog, &alog
				if err := a.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan struct{})
				go func() { a.Wait(); close(exited) }()
				t.Cleanup(func() { a.Process.Kill(); <-exited })

				var first string
				testkit.WaitFor(t, pgWait, func() bool { first = w.leasedBy(crashed); return first != "" }, "node A to lease an entry")
				b := testkit.Start(t, nil, w.args("--workers", "2", "--node-id", survivor)...)
				select {
				case <-exited:
				case <-time.After(pgWait):
					t.Fatalf("crash point %s never fired\n%s", cp.point, alog.String())
				}
				if ws, ok := a.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("node A ended with %v, want killed by SIGKILL\n%s", a.ProcessState, alog.String())
				}
				w.checkAtTakeOverCrash(first, cp.at, alog.String())

				w.settled()
				if cp.at.write == touba.EffectDispatched {
					b.WaitLog(`"previous_node":"`+crashed+`"`, pgWait)
				}
				stop(t, b)
				w.check(map[string]end{first: cp.after(mode)})
			})
		}
	}
}

// checkAtTakeOverCrash is checkAtCrash for the one entry node A held: its
// effects are in the states the crash point names, it is still A's, and
// the remote saw the requests the point says for it. The other entries
// are node B's business by then.
func (w *world) checkAtTakeOverCrash(first string, at atCrash, log string) {
	t := w.t
	t.Helper()
	effects, _ := w.effects()
	got := fmt.Sprint(effects[effectID(first, stepWrite)].State, "/", effects[effectID(first, stepConfirm)].State)
	if want := fmt.Sprint(at.write, "/", at.confirm); got != want {
		t.Errorf("at the crash, effects write/confirm of %s are %s, want %s\n%s", first, got, want, log)
	}
	n := 0
	for _, l := range w.remoteLines() {
		if strings.HasPrefix(l.EffectID, first+":") {
			n++
		}
	}
	if n != at.requests {
		t.Errorf("at the crash, the remote saw %d requests for %s, want %d", n, first, at.requests)
	}
	if e := w.entries()[first]; e.Status != touba.StatusRunning || e.LeaseOwner != crashed {
		t.Errorf("at the crash, entry %s is %s held by %q, want running held by %s", first, e.Status, e.LeaseOwner, crashed)
	}
	if t.Failed() {
		t.FailNow()
	}
}
