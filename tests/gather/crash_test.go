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

// ranOnce waits until the runs of key saw want, then checks that each of
// those deliveries was in exactly one run and each run reached the remote
// once, but for before calls that reached it before the crash (a call in
// flight at a SIGKILL is sent again under its idempotency key, SPEC §5).
// A restart slower than the window starts the gathering made before the
// crash on its own; the later deliveries then make another: either way
// nothing is lost and nothing runs twice.
func (w *world) ranOnce(key string, want []int, before int) []call {
	w.t.Helper()
	var got []int
	var calls []call
	testkit.WaitFor(w.t, waitLong, func() bool {
		calls, got = w.r.forKey(key), nil
		for _, c := range calls {
			got = append(got, c.seqs()...)
		}
		return len(got) >= len(want)
	}, "every delivery of "+key+" run")
	w.stop() // nothing more is due: a repeat would have come before the runs ended
	slices.Sort(got)
	if !slices.Equal(got, want) {
		w.t.Fatalf("the runs of %s saw %v, want %v each once", key, got, want)
	}
	if all, total := w.r.got(); total > len(all)+before {
		w.t.Fatalf("the remote had %d runs called %d times (%d before the crash)", len(all), total, before)
	}
	return calls
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
	calls := w.ranOnce("o", seqs(1, 5), 0)
	if c := calls[0]; c.Input.Events[0].QueueID != carrier {
		t.Fatalf("the first run's carrier is %s, want %s, the delivery committed before the crash", c.Input.Events[0].QueueID, carrier)
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
	if c := w.ranOnce("m", seqs(1, 5), 0)[0]; !slices.Equal(c.seqs()[:2], []int{1, 2}) {
		t.Fatalf("the first run saw %v, want the delivery merged before the crash with its carrier", c.seqs())
	}
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
	// Started: its carrier pending, or running when the leaser took it
	// before the kill (the crash point comes after the start's commit).
	if e := w.show(carrier); e.Status != "pending" && e.Status != "running" || e.Gathering == nil || e.Gathering.State != "started" {
		t.Fatalf("at the crash the carrier is %+v, want pending or running, its gathering started", e)
	}
	_, before := w.r.got()
	w.start("")
	if calls := w.ranOnce("s", seqs(1, 5), before); len(calls) != 1 {
		t.Fatalf("%d runs, want the one gathering started before the crash", len(calls))
	}
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
	_, before := w.r.got()
	w.start("")
	w.resent(refRows, "b-3", "b", 3)
	if calls := w.ranOnce("b", seqs(1, 3), before); len(calls) != 1 {
		t.Fatalf("%d runs, want the one full batch", len(calls))
	}
	testkit.WaitFor(t, waitLong, func() bool { return len(w.entries(refRows)["merged"]) == 2 }, "two merged")
}
