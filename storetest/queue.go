package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// The identity decision (SPEC §3.1): the queue answers Created, or the
// QueueID, Digest and Status of the entry that holds the identity, and
// intake maps that to enqueued, duplicate, conflict or replay rejected.
func runQueue(t *testing.T, f Factory) {
	t.Run("NewEntry", func(t *testing.T) { testNewEntry(t, f) })
	t.Run("IdentityDecision", func(t *testing.T) { testIdentityDecision(t, f) })
	t.Run("IdentityIsTriggerAndEventID", func(t *testing.T) { testIdentityScope(t, f) })
	t.Run("EmptyEventIDNeverDedupes", func(t *testing.T) { testEmptyEventID(t, f) })
	t.Run("ConcurrentIdenticalMakeOneEntry", func(t *testing.T) { testConcurrentEnqueue(t, f, false) })
	t.Run("ConcurrentDigestsMakeOneEntry", func(t *testing.T) { testConcurrentEnqueue(t, f, true) })
	t.Run("MaxPending", func(t *testing.T) { testMaxPending(t, f) })
	t.Run("Durable", func(t *testing.T) { testEnqueueDurable(t, f) })
	t.Run("OversizedKeysRefusedAlone", func(t *testing.T) { testOversizedKeysRefusedAlone(t, f) })
}

// enqueue enqueues d and fails the test on an error.
func (e *env) enqueue(t *testing.T, d *touba.Delivery) touba.EnqueueResult {
	t.Helper()
	r, err := e.Queue.Enqueue(e.ctx, d)
	if err != nil {
		t.Fatalf("enqueue %s/%s: %v", d.TriggerRef, d.EventID, err)
	}
	return r
}

// put enqueues a new delivery and returns its queue id.
func (e *env) put(t *testing.T, eventID, body string) string {
	t.Helper()
	r := e.enqueue(t, delivery(eventID, body))
	if !r.Created || r.QueueID == "" {
		t.Fatalf("enqueue %s: %+v, want a new entry", eventID, r)
	}
	return r.QueueID
}

// get reads an entry that must exist.
func (e *env) get(t *testing.T, queueID string) *touba.Delivery {
	t.Helper()
	d, err := e.Queue.Get(e.ctx, queueID)
	if err != nil || d == nil {
		t.Fatalf("get %s: %v, %v", queueID, d, err)
	}
	return d
}

// entries lists every entry of the queue.
func (e *env) entries(t *testing.T) []*touba.Delivery {
	t.Helper()
	all, err := e.Queue.List(e.ctx, touba.EntryFilter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func testNewEntry(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	d := delivery("e1", `{"n":1}`)
	r := e.enqueue(t, d)
	if !r.Created || r.QueueID == "" || r.Digest != d.Digest || r.Status != touba.StatusPending {
		t.Fatalf("result %+v, want created, pending, digest %s", r, d.Digest)
	}
	if d.QueueID != r.QueueID {
		t.Fatalf("d.QueueID=%q, want the result's %q", d.QueueID, r.QueueID)
	}
	got := e.get(t, r.QueueID)
	if got.TriggerRef != "trigger:t" || got.EventID != "e1" || got.Digest != d.Digest || string(got.Body) != `{"n":1}` ||
		got.Headers["Content-Type"] != "application/json" || got.RemoteAddr != d.RemoteAddr ||
		got.Status != touba.StatusPending || got.Attempts != 0 || got.ErrorCode != "" {
		t.Fatalf("stored %+v", got)
	}
	if !got.ReceivedAt.Equal(Epoch) || !got.UpdatedAt.Equal(Epoch) {
		t.Fatalf("received_at=%v updated_at=%v, want the clock's %v", got.ReceivedAt, got.UpdatedAt, Epoch)
	}
	if got, want := e.Queue.Pending(), int64(1); got != want {
		t.Fatalf("pending=%d, want %d", got, want)
	}
	if d, err := e.Queue.Get(e.ctx, "no-such-entry"); d != nil || err != nil {
		t.Fatalf("get of a missing entry: %v, %v; want nil, nil", d, err)
	}
	if st := e.Queue.QueueStats(); st.Enqueued != 1 || st.Commits < 1 {
		t.Fatalf("stats %+v, want 1 enqueued in at least one commit", st)
	}
}

// testIdentityDecision walks one identity through the four answers.
func testIdentityDecision(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	first := delivery("e1", `{"n":1}`)
	id := e.put(t, "e1", `{"n":1}`)
	check := func(what string, d *touba.Delivery, status string) {
		t.Helper()
		r := e.enqueue(t, d)
		if r.Created || r.QueueID != id || r.Digest != first.Digest || r.Status != status {
			t.Fatalf("%s: %+v, want not created, queue id %s, the stored digest %s, status %s",
				what, r, id, first.Digest, status)
		}
	}
	// Duplicate: same identity and digest, entry pending.
	check("duplicate", delivery("e1", `{"n":1}`), touba.StatusPending)
	// Conflict: the stored digest comes back, so the caller sees it differs.
	check("conflict", delivery("e1", `{"n":2}`), touba.StatusPending)
	if got, want := len(e.entries(t)), 1; got != want {
		t.Fatalf("%d entries, want %d", got, want)
	}
	if got, want := e.Queue.Pending(), int64(1); got != want {
		t.Fatalf("pending=%d after duplicates, want %d", got, want)
	}
	// Replay rejected: the entry is past pending.
	e.lease(t, 1, id)
	check("redelivery while running", delivery("e1", `{"n":1}`), touba.StatusRunning)
	e.finish(t, id, touba.StatusDone)
	check("redelivery when done", delivery("e1", `{"n":1}`), touba.StatusDone)
	check("conflict when done", delivery("e1", `{"n":3}`), touba.StatusDone)
	if st := e.Queue.QueueStats(); st.Enqueued != 1 {
		t.Fatalf("stats %+v, want 1 enqueued: answers to known identities are no enqueues", st)
	}
}

func testIdentityScope(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a := e.put(t, "same", "x")
	other := delivery("same", "x")
	other.TriggerRef = "trigger:other"
	r := e.enqueue(t, other)
	if !r.Created || r.QueueID == a {
		t.Fatalf("same event id under another trigger: %+v, want a new entry", r)
	}
}

func testEmptyEventID(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a := e.put(t, "", "same body")
	b := e.put(t, "", "same body")
	if a == b {
		t.Fatalf("two deliveries without event id share queue id %s", a)
	}
	if got, want := len(e.entries(t)), 2; got != want {
		t.Fatalf("%d entries, want %d", got, want)
	}
}

// testConcurrentEnqueue: 200 concurrent deliveries of one identity, all of
// one body or each with its own, make exactly one entry, and every caller
// learns the same queue id and the winner's digest.
func testConcurrentEnqueue(t *testing.T, f Factory, distinctDigests bool) {
	e := open(t, f, Options{})
	const n = 200
	results := make([]touba.EnqueueResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := "same"
			if distinctDigests {
				body = fmt.Sprintf("body-%d", i)
			}
			<-start
			results[i], errs[i] = e.Queue.Enqueue(e.ctx, delivery("one", body))
		}()
	}
	close(start)
	wg.Wait()
	created, winner := 0, -1
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if r.Created {
			created, winner = created+1, i
		}
	}
	if created != 1 {
		t.Fatalf("%d callers created an entry, want exactly 1", created)
	}
	w := results[winner]
	for i, r := range results {
		if r.QueueID != w.QueueID || r.Digest != w.Digest || r.Status != touba.StatusPending {
			t.Fatalf("caller %d: %+v, want queue id %s, digest %s, pending", i, r, w.QueueID, w.Digest)
		}
	}
	if distinctDigests && w.Digest != digest(fmt.Sprintf("body-%d", winner)) {
		t.Fatalf("stored digest %s is not the winner's", w.Digest)
	}
	all := e.entries(t)
	if len(all) != 1 || all[0].QueueID != w.QueueID {
		t.Fatalf("%d entries stored, want exactly the winner's", len(all))
	}
	if got, want := e.Queue.Pending(), int64(1); got != want {
		t.Fatalf("pending=%d, want %d", got, want)
	}
}

// testMaxPending: at --max-pending a new delivery is refused, but a known
// identity still gets its true answer (duplicate, conflict), and leasing
// makes room again.
func testMaxPending(t *testing.T, f Factory) {
	e := open(t, f, Options{MaxPending: 2})
	a := e.put(t, "a", "1")
	e.put(t, "b", "2")
	for name, d := range map[string]*touba.Delivery{"new identity": delivery("c", "3"), "no event id": delivery("", "4")} {
		if r, err := e.Queue.Enqueue(e.ctx, d); !errors.Is(err, touba.ErrQueueFull) {
			t.Fatalf("%s when full: %+v, %v; want ErrQueueFull", name, r, err)
		}
	}
	for name, body := range map[string]string{"duplicate": "1", "conflict": "other"} {
		r, err := e.Queue.Enqueue(e.ctx, delivery("a", body))
		if err != nil || r.Created || r.QueueID != a || r.Digest != digest("1") || r.Status != touba.StatusPending {
			t.Fatalf("%s of a known identity when full: %+v, %v; want its true answer", name, r, err)
		}
	}
	if got, want := len(e.entries(t)), 2; got != want {
		t.Fatalf("%d entries, want %d", got, want)
	}
	e.lease(t, 1, a)
	e.put(t, "c", "3")
	if _, err := e.Queue.Enqueue(e.ctx, delivery("d", "5")); !errors.Is(err, touba.ErrQueueFull) {
		t.Fatalf("full again: %v, want ErrQueueFull", err)
	}
}

// testEnqueueDurable: entries, their identities and the pending count
// survive a restart.
func testEnqueueDurable(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a := e.put(t, "a", "1")
	b := e.put(t, "b", "2")
	e.lease(t, 1, a)
	e.finish(t, a, touba.StatusDone)
	e = e.reopen(t)
	if got, want := e.Queue.Pending(), int64(1); got != want {
		t.Fatalf("pending after restart=%d, want %d", got, want)
	}
	if got := e.get(t, b); got.Status != touba.StatusPending || string(got.Body) != "2" {
		t.Fatalf("b after restart: %+v", got)
	}
	r := e.enqueue(t, delivery("a", "1"))
	if r.Created || r.QueueID != a || r.Status != touba.StatusDone {
		t.Fatalf("redelivery after restart: %+v, want the done entry %s", r, a)
	}
}
