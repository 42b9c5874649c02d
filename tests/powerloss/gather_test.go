package powerloss_test

import (
	"context"
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

// gatherProgram debounces the orders per customer (SPEC §2.1): a
// gathering is a carrier entry waiting and a row of gatherings, and each
// later delivery of its key an entry merged into it.
const gatherProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:power/Orders", "source": {"kind": "webhook"},
   "debounce": {"key": {"$ref": "/event/body/customer"}, "window_ms": 4000, "max_wait_ms": 60000},
   "steps": [{"id": "write", "tool": "tool:power/Write", "input": {"orders": {"$ref": "/events"}}}],
   "retry": {"max_attempts": 3, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`

// TestPowerLossOpenGathering acknowledges deliveries of two customers,
// each gathered into an open gathering, and cuts the power while both
// gather: every acknowledged delivery is on the disk, in its gathering
// (the carrier waiting in it, the others merged into it). After the
// restart each gathering starts once its time comes and runs once, with
// every delivery; nothing is written twice.
func TestPowerLossOpenGathering(t *testing.T) {
	const perKey = 5
	w := newWorld(t, false)
	if err := os.WriteFile(w.program, []byte(gatherProgram), 0o600); err != nil {
		t.Fatal(err)
	}
	d := w.start()
	url := d.URL() + "/triggers/power/Orders"
	for i := range perKey {
		for _, c := range []string{"c1", "c2"} {
			id := fmt.Sprintf("%s-%d", c, i)
			status, qid := testkit.Post(t, url, id, fmt.Sprintf(`{"customer":%q,"n":%d}`, c, i))
			if status != http.StatusAccepted || qid == "" {
				t.Fatalf("post %s: status %d, want 202\n%s", id, status, d.Log())
			}
			w.acked[id] = qid
		}
	}
	d.Cmd.Process.Signal(syscall.SIGKILL)
	d.Wait(10 * time.Second)
	w.d.cut()

	if f := w.check(nil); f.any() {
		t.Fatalf("after the cut: %v", f)
	}
	carriers := w.gatherings(t, perKey, true)
	if len(w.remote.writes()) != 0 {
		t.Fatalf("a gathering ran before its time")
	}

	d = w.start()
	testkit.WaitFor(t, 60*time.Second, func() bool { return w.countStatus(touba.StatusDone) == 2 },
		"both gatherings started and run")
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(60 * time.Second); code != 0 {
		t.Fatalf("clean stop: exit code %d\n%s", code, d.Log())
	}
	if got := w.gatherings(t, perKey, false); got[0] != carriers[0] || got[1] != carriers[1] {
		t.Fatalf("carriers %v after the restart, %v before", got, carriers)
	}
	writes := w.remote.writes()
	for _, c := range carriers {
		if n := writes[c+":write"]; n != 1 {
			t.Errorf("the gathering of %s was written %d times, want once", c, n)
		}
	}
	if len(writes) != 2 {
		t.Errorf("the remote saw %d effects, want 2: %v", len(writes), writes)
	}
}

// gatherings reads, with no daemon running, the two customers'
// gatherings: each holds its perKey acknowledged deliveries, open (its
// carrier waiting) or, once run, started (its carrier done). It returns
// the carriers, c1's first.
func (w *world) gatherings(t *testing.T, perKey int, open bool) [2]string {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, w.d.path("q.sqlite"), queue.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var out [2]string
	for k, c := range []string{"c1", "c2"} {
		carrier := w.acked[c+"-0"]
		out[k] = carrier
		g, err := q.Gathering(ctx, carrier)
		if err != nil || g == nil {
			t.Fatalf("%s: no gathering carried by %s (%v)", c, carrier, err)
		}
		e, err := q.Get(ctx, carrier)
		if err != nil {
			t.Fatal(err)
		}
		wantState, wantStatus := touba.GatheringStarted, touba.StatusDone
		if open {
			wantState, wantStatus = touba.GatheringOpen, touba.StatusWaiting
		}
		if g.State != wantState || g.Live != open || g.Size != perKey || e.Status != wantStatus {
			t.Fatalf("%s: gathering %+v, carrier %s; want %s with %d deliveries, carrier %s", c, g, e.Status, wantState, perKey, wantStatus)
		}
		merged, err := q.Gathered(ctx, carrier)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range merged {
			if want := w.acked[fmt.Sprintf("%s-%d", c, i+1)]; m.QueueID != want || m.Status != touba.StatusMerged {
				t.Fatalf("%s: merged #%d is %s (%s), want %s merged", c, i+1, m.QueueID, m.Status, want)
			}
		}
		if len(merged) != perKey-1 {
			t.Fatalf("%s: %d merged, want %d", c, len(merged), perKey-1)
		}
	}
	return out
}
