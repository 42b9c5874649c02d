package gather_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// The crash points of gatherings (trigger.CrashAfterGatherOpened and the
// others; the names are the contract of these tests).
const (
	cpGatherOpened  = "after-gather-opened"  // intake committed a delivery that opened a gathering, not answered
	cpMerged        = "after-merged"         // intake committed a delivery merged into a gathering, not answered
	cpGatherStarted = "after-gather-started" // a gathering started (its time came, or a batch filled), nothing run
)

// killedBy waits for the daemon armed with a crash point to die on it
// (SIGKILL: -1), then checks what it left.
func (w *world) killedBy(cp string) {
	w.t.Helper()
	if code := w.d.Wait(waitLong); code != -1 {
		w.t.Fatalf("the daemon armed with %s exited %d, want killed\n%s", cp, code, w.d.Log())
	}
}

// resent sends a delivery again after the crash that hid its answer: its
// entry is in the queue (committed before the crash) and waiting in its
// gathering or merged into it, so the sender's retry is answered 200
// consumed, with that entry's queue id.
func (w *world) resent(ref, eventID, key string, seq int) string {
	w.t.Helper()
	a, err := w.send(ref, eventID, key, seq, "")
	if err != nil || a.Status != http.StatusOK || a.Answer != "consumed" || a.QueueID == "" {
		w.t.Fatalf("retry of %s after the crash: %+v, %v; want 200 consumed (its entry was committed)", eventID, a, err)
	}
	return a.QueueID
}

// oneRun waits for key's run and checks that it came once, with seqs.
func (w *world) oneRun(key string, want []int) {
	w.t.Helper()
	c := w.waitCalls(key, 1)[0]
	if !slices.Equal(c.seqs(), want) {
		w.t.Fatalf("the run of %s saw %v, want %v", key, c.seqs(), want)
	}
	w.stop() // nothing more is due: a repeat would have come before the runs ended
	if calls, total := w.r.got(); len(calls) != 1 || total != 1 {
		w.t.Fatalf("the remote had %d runs, %d calls; want one run called once", len(calls), total)
	}
}

// TestCrashAfterGatherOpened: SIGKILL after the first delivery opened its
// gathering, before the sender had its answer. After the restart the
// sender's retry finds it (200 consumed), the next deliveries join its
// gathering, and the one run sees them all.
func TestCrashAfterGatherOpened(t *testing.T) {
	t.Parallel()
	w := newWorld(t, gathering{window: time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	w.start(cpGatherOpened)
	if _, err := w.send(refProducts, "o-1", "o", 1, ""); err == nil {
		t.Fatalf("the delivery that opened a gathering was answered: the crash point did not fire")
	}
	w.killedBy(cpGatherOpened)
	w.start("")
	carrier := w.resent(refProducts, "o-1", "o", 1)
	for i := 2; i <= 5; i++ {
		w.post(refProducts, fmt.Sprintf("o-%d", i), "o", i)
	}
	w.oneRun("o", seqs(1, 5))
	if e := w.show(carrier); e.Status != "done" || e.Gathering == nil || e.Gathering.Size != 5 {
		t.Fatalf("the carrier: %+v, want done with its gathering of 5", e)
	}
}

// TestCrashAfterMerged: SIGKILL after the second delivery was merged,
// before its answer. After the restart its retry is 200 consumed and it
// is in the run once, not twice.
func TestCrashAfterMerged(t *testing.T) {
	t.Parallel()
	w := newWorld(t, gathering{window: time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	w.start(cpMerged)
	carrier := w.post(refProducts, "m-1", "m", 1)
	if _, err := w.send(refProducts, "m-2", "m", 2, ""); err == nil {
		t.Fatalf("the merged delivery was answered: the crash point did not fire")
	}
	w.killedBy(cpMerged)
	w.start("")
	merged := w.resent(refProducts, "m-2", "m", 2)
	if e := w.show(merged); e.Status != "merged" || e.MergedInto != carrier {
		t.Fatalf("the retried delivery's entry: %+v, want merged into %s", e, carrier)
	}
	for i := 3; i <= 5; i++ {
		w.post(refProducts, fmt.Sprintf("m-%d", i), "m", i)
	}
	w.oneRun("m", seqs(1, 5))
}

// TestCrashAfterGatherStarted: SIGKILL once a gathering's time started it
// (its carrier pending), before any run. After the restart it runs once,
// with every delivery.
func TestCrashAfterGatherStarted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, gathering{window: 500 * time.Millisecond, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	w.start(cpGatherStarted)
	carrier := w.post(refProducts, "s-1", "s", 1)
	for i := 2; i <= 5; i++ {
		w.post(refProducts, fmt.Sprintf("s-%d", i), "s", i)
	}
	w.killedBy(cpGatherStarted)
	if e := w.show(carrier); e.Status != "pending" || e.Gathering == nil || e.Gathering.State != "started" {
		t.Fatalf("at the crash the carrier is %+v, want pending, its gathering started", e)
	}
	if calls, _ := w.r.got(); len(calls) != 0 {
		t.Fatalf("a run reached the remote before the crash")
	}
	w.start("")
	w.oneRun("s", seqs(1, 5))
}

// TestCrashAfterBatchFilled: SIGKILL in intake, once the delivery that
// filled a batch committed it and started it, before its answer. After
// the restart its retry is 200 consumed, and the batch runs once.
func TestCrashAfterBatchFilled(t *testing.T) {
	t.Parallel()
	w := newWorld(t, gathering{window: time.Second, maxWait: time.Minute, batchSize: 3, batchWindow: time.Minute})
	w.start(cpGatherStarted)
	w.post(refRows, "b-1", "b", 1)
	w.post(refRows, "b-2", "b", 2)
	if _, err := w.send(refRows, "b-3", "b", 3, ""); err == nil {
		t.Fatalf("the delivery that filled the batch was answered: the crash point did not fire")
	}
	w.killedBy(cpGatherStarted)
	w.start("")
	w.resent(refRows, "b-3", "b", 3)
	w.oneRun("b", seqs(1, 3))
	testkit.WaitFor(t, waitLong, func() bool { return len(w.entries(refRows)["merged"]) == 2 }, "two merged")
}
