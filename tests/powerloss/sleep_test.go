package powerloss_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// sleepProgram writes, sleeps until the order's nap_until, then writes
// again (SPEC §2.3): an entry between its two writes is waiting, and
// holds nothing but rows of the queue.
const sleepProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:power/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:power/Write", "input": {"order": {"$ref": "/event/body"}}},
             {"id": "nap", "sleep": {"until": {"$ref": "/event/body/nap_until"}}},
             {"id": "confirm", "tool": "tool:power/Write", "input": {"order": {"$ref": "/event/body"}}}],
   "retry": {"max_attempts": 3, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`

// TestPowerLossSleepingEntry acknowledges orders, lets each run its first
// write and fall asleep, and cuts the power while they all sleep: the
// waiting entries, their sleeps and their applied writes must be on the
// disk (each was committed, so synced, before it was visible). After the
// restart each wakes once its time comes and runs its confirm once; the
// first write is read back from the journal, never sent again (retry_mode
// none: a repeat is a second request at the remote).
func TestPowerLossSleepingEntry(t *testing.T) {
	const orders = 4
	w := newWorld(t, false)
	if err := os.WriteFile(w.program, []byte(sleepProgram), 0o600); err != nil {
		t.Fatal(err)
	}
	d := w.start()
	url := d.URL() + "/triggers/power/Orders"
	// One wake time for all, a few seconds on: they all sleep at once
	// however slow the machine, and the restart still finds them asleep.
	until := time.Now().Add(6 * time.Second).UTC().Format(time.RFC3339Nano)
	for i := 0; i < orders; i++ {
		id := fmt.Sprintf("sleeper-%d", i)
		status, qid := testkit.Post(t, url, id, fmt.Sprintf(`{"order_id":%q,"nap_until":%q}`, id, until))
		if status != http.StatusAccepted || qid == "" {
			t.Fatalf("post %s: status %d, want 202\n%s", id, status, d.Log())
		}
		w.acked[id] = qid
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return w.countStatus(touba.StatusWaiting) == orders },
		"every order asleep after its first write")

	applied, err := w.appliedNow()
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != orders {
		t.Fatalf("with every order asleep the journal shows %d applied effects, want %d (the first writes)", len(applied), orders)
	}
	seen := map[string]bool{}
	for _, id := range applied {
		seen[id] = true
	}
	d.Cmd.Process.Signal(syscall.SIGKILL)
	d.Wait(10 * time.Second)
	w.d.cut()

	if f := w.check(seen); f.any() {
		t.Fatalf("after the cut: %v", f)
	}
	ws := w.sleeps(t)
	for _, qid := range w.acked {
		if e := ws[qid]; e.status != touba.StatusWaiting || e.nap.State != touba.WaitOpen || e.nap.WakeAt == nil {
			t.Errorf("after the cut, %s is %s with its nap %+v, want waiting on an open sleep", qid, e.status, e.nap)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	d = w.start()
	testkit.WaitFor(t, 60*time.Second, func() bool { return w.countStatus(touba.StatusDone) == orders },
		"every order woken and done")
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(60 * time.Second); code != 0 {
		t.Fatalf("clean stop: exit code %d\n%s", code, d.Log())
	}

	writes := w.remote.writes()
	ws = w.sleeps(t)
	for ev, qid := range w.acked {
		for _, step := range []string{"write", "confirm"} {
			if n := writes[qid+":"+step]; n != 1 {
				t.Errorf("%s: the remote saw %d requests for step %s, want 1", ev, n, step)
			}
		}
		e := ws[qid]
		if e.status != touba.StatusDone || e.nap.State != touba.WaitWoke || e.nap.ResolvedAt == nil || e.nap.ResolvedAt.Before(*e.nap.WakeAt) {
			t.Errorf("%s: %s with nap %+v, want done after its sleep woke no earlier than its end", ev, e.status, e.nap)
		}
	}
	if len(writes) != 2*orders {
		t.Errorf("the remote saw %d effects, want %d: %v", len(writes), 2*orders, writes)
	}
}

// countStatus counts, while the daemon runs, the entries in status:
// read-only through the mount, as appliedNow reads the journal.
func (w *world) countStatus(status string) int {
	db, err := sql.Open("sqlite3", "file:"+w.d.path("q.sqlite")+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		return -1
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM entries WHERE status = ?`, status).Scan(&n); err != nil {
		return -1 // not yet created or migrated
	}
	return n
}

// sleeper is what the test reads of one entry with no daemon running.
type sleeper struct {
	status string
	nap    touba.Wait
}

// sleeps reads every entry's status and its nap wait through the queue,
// read-only, with no daemon running.
func (w *world) sleeps(t *testing.T) map[string]sleeper {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, w.d.path("q.sqlite"), queue.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	all, err := q.List(ctx, touba.EntryFilter{Limit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sleeper{}
	for _, e := range all {
		s := sleeper{status: e.Status}
		waits, err := q.Waits(ctx, e.QueueID)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range waits {
			if x.QueueID == e.QueueID && x.StepID == "nap" {
				s.nap = x
			}
		}
		out[e.QueueID] = s
	}
	return out
}
