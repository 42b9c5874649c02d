package gather_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// TestDebounceGathersAStorm: 20 deliveries of one product within the
// window make one run, which sees all 20 in acceptance order (the first
// one carries it, 19 end merged, each naming it); another product's
// delivery runs on its own. The merged deliveries keep their identity: an
// exact redelivery is answered 200 consumed with its own queue id, another
// body under its id 409.
func TestDebounceGathersAStorm(t *testing.T) {
	t.Parallel()
	w := newWorld(t, gathering{window: 2 * time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	w.start("")
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = w.post(refProducts, fmt.Sprintf("p1-%02d", i+1), "p1", i+1)
	}
	other := w.post(refProducts, "p2-01", "p2", 1)

	p1 := w.waitCalls("p1", 1)[0]
	if got := p1.seqs(); !slices.Equal(got, seqs(1, 20)) {
		t.Fatalf("the run of p1 saw %v, want the 20 deliveries in order", got)
	}
	if p1.Input.Last != 20 || p1.Input.Events[0].QueueID != ids[0] || p1.Input.Events[19].QueueID != ids[19] {
		t.Fatalf("the run of p1: /event is seq %d, events from %s to %s; want the last (20) and the queue ids %s..%s",
			p1.Input.Last, p1.Input.Events[0].QueueID, p1.Input.Events[19].QueueID, ids[0], ids[19])
	}
	if p2 := w.waitCalls("p2", 1)[0]; !slices.Equal(p2.seqs(), []int{1}) || p2.Input.Events[0].QueueID != other {
		t.Fatalf("the run of p2 saw %v, want its one delivery", p2.seqs())
	}
	testkit.WaitFor(t, waitLong, func() bool { return len(w.entries(refProducts)["done"]) == 2 }, "both carriers done")
	byStatus := w.entries(refProducts)
	if len(byStatus["merged"]) != 19 {
		t.Fatalf("%d merged entries, want 19: %v", len(byStatus["merged"]), byStatus)
	}
	for _, m := range byStatus["merged"] {
		if m.MergedInto != ids[0] {
			t.Fatalf("merged entry %s names carrier %q, want %s", m.QueueID, m.MergedInto, ids[0])
		}
	}
	carrier := w.show(ids[0])
	if g := carrier.Gathering; g == nil || g.State != "started" || g.Size != 20 || len(g.Merged) != 19 || g.Merged[0].QueueID != ids[1] {
		t.Fatalf("queue show of the carrier: %+v, want its 19 merged deliveries listed", carrier.Gathering)
	}
	if m := w.show(ids[7]); m.Status != "merged" || m.MergedInto != ids[0] || len(m.Next) == 0 {
		t.Fatalf("queue show of a merged entry: %+v, want it linked to %s", m, ids[0])
	}

	// A redelivery of a merged entry: 200 consumed, its own queue id.
	a, err := w.send(refProducts, "p1-08", "p1", 8, "")
	if err != nil || a.Status != http.StatusOK || a.Answer != "consumed" || a.Code != "TriggerReplayRejected" || a.QueueID != ids[7] {
		t.Fatalf("redelivery of a merged entry: %+v, %v; want 200 consumed for %s", a, err, ids[7])
	}
	// Another body under its id: 409, nothing enqueued.
	a, err = w.send(refProducts, "p1-08", "p1", 8, "changed")
	if err != nil || a.Status != http.StatusConflict || a.Error.Code != "TriggerEventPayloadConflict" || a.Error.QueueID != ids[7] {
		t.Fatalf("conflict with a merged entry: %+v, %v; want 409 TriggerEventPayloadConflict for %s", a, err, ids[7])
	}
	if calls, total := w.r.got(); len(calls) != 2 || total != 2 {
		t.Fatalf("the remote had %d runs (%d calls), want 2 runs called once each", len(calls), total)
	}
}

// TestDebounceMaxWait: a storm that never pauses for the window (a
// delivery every 150 ms, window 1 s) is still run max_wait_ms (2.5 s)
// after its first delivery; the deliveries after that start make the next
// gathering; every delivery is run once, in order.
func TestDebounceMaxWait(t *testing.T) {
	t.Parallel()
	w := newWorld(t, gathering{window: time.Second, maxWait: 2500 * time.Millisecond, batchSize: 10, batchWindow: time.Second})
	w.start("")
	sent := 0
	first := time.Now()
	w.post(refProducts, "s-001", "s", 1)
	sent++
	// The storm goes on until the first run reached the remote, and a
	// little after, so it never paused for a window before that run.
	var firstRun time.Time
	for extra := 0; extra < 5; {
		if sent > 200 {
			t.Fatalf("no run after %d deliveries (%s): max_wait_ms does not bound the storm", sent, time.Since(first))
		}
		time.Sleep(150 * time.Millisecond) // the storm's pace, not a wait for a result
		sent++
		w.post(refProducts, fmt.Sprintf("s-%03d", sent), "s", sent)
		if calls := w.r.forKey("s"); len(calls) > 0 {
			if firstRun.IsZero() {
				firstRun = calls[0].At
			}
			extra++
		}
	}
	calls := w.r.forKey("s")
	if got := calls[0].At.Sub(first); got < 2500*time.Millisecond {
		t.Fatalf("the first run came %s after the first delivery, before max_wait_ms", got)
	}
	if n := len(calls[0].Input.Events); n < 2 || n >= sent {
		t.Fatalf("the first run saw %d of the %d deliveries, want the ones before its start only", n, sent)
	}
	// The rest are gathered anew and run once the storm stops.
	var all []int
	testkit.WaitFor(t, waitLong, func() bool {
		all = all[:0]
		for _, c := range w.r.forKey("s") {
			all = append(all, c.seqs()...)
		}
		return len(all) >= sent
	}, "every delivery of the storm run")
	if !slices.Equal(all, seqs(1, sent)) {
		t.Fatalf("the runs saw %v, want 1..%d each once, in order", all, sent)
	}
}

// TestBatchBySize: 25 deliveries of one account with max_size 10 make
// runs of 10, 10 and 5; the full ones start at once, the last one at its
// window's end.
func TestBatchBySize(t *testing.T) {
	t.Parallel()
	w := newWorld(t, gathering{window: time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: 3 * time.Second})
	w.start("")
	for i := 1; i <= 25; i++ {
		w.post(refRows, fmt.Sprintf("r-%02d", i), "acct", i)
	}
	calls := w.waitCalls("acct", 3)
	var sizes []int
	var all []int
	for _, c := range calls {
		sizes = append(sizes, len(c.Input.Events))
		all = append(all, c.seqs()...)
	}
	if !slices.Equal(sizes, []int{10, 10, 5}) || !slices.Equal(all, seqs(1, 25)) {
		t.Fatalf("batches %v of %v, want 10, 10 and 5 of 1..25 in order", sizes, all)
	}
	testkit.WaitFor(t, waitLong, func() bool { return len(w.entries(refRows)["done"]) == 3 }, "the three carriers done")
	if m := w.entries(refRows)["merged"]; len(m) != 22 {
		t.Fatalf("%d merged, want 22", len(m))
	}
	if _, total := w.r.got(); total != 3 {
		t.Fatalf("%d calls, want 3", total)
	}
}
