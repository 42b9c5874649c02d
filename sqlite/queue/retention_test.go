package queue_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// clock is a settable time for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openAt(tb testing.TB, c *clock) *queue.Queue {
	tb.Helper()
	q, err := queue.Open(context.Background(), filepath.Join(tb.TempDir(), "q.sqlite"), queue.Options{Now: c.Now})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { q.Close() })
	return q
}

func put(tb testing.TB, q *queue.Queue, id, body string) string {
	tb.Helper()
	r, err := q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:r", EventID: id,
		Digest: dedupe.Digest([]byte(body)), Body: []byte(body)})
	if err != nil || !r.Created {
		tb.Fatalf("enqueue %s: %v %+v", id, err, r)
	}
	return r.QueueID
}

// end leases the next entry (the oldest) and ends it in status.
func end(tb testing.TB, q *queue.Queue, want, status string) {
	tb.Helper()
	got, err := q.Lease(context.Background(), 1)
	if err != nil || len(got) != 1 || got[0].QueueID != want {
		tb.Fatalf("lease: %v %+v, want %s", err, got, want)
	}
	if err := q.Finish(context.Background(), want, got[0].LeaseToken, status, "", ""); err != nil {
		tb.Fatal(err)
	}
}

func bodyOf(tb testing.TB, q *queue.Queue, id string) []byte {
	tb.Helper()
	d, err := q.Get(context.Background(), id)
	if err != nil || d == nil {
		tb.Fatalf("get %s: %v", id, err)
	}
	return d.Body
}

// TestPurgeBodiesOnlyOldDone checks that retention drops the bodies of done
// entries past the cutoff and nothing else, and that a purged entry's
// identity still answers a redelivery.
func TestPurgeBodiesOnlyOldDone(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	q := openAt(t, c)
	oldDone := put(t, q, "old-done", `{"n":1}`)
	failed := put(t, q, "failed", `{"n":2}`)
	parked := put(t, q, "parked", `{"n":3}`)
	end(t, q, oldDone, touba.StatusDone)
	end(t, q, failed, touba.StatusFailed)
	end(t, q, parked, touba.StatusParked)
	c.Add(48 * time.Hour)
	newDone := put(t, q, "new-done", `{"n":4}`)
	end(t, q, newDone, touba.StatusDone)
	pending := put(t, q, "pending", `{"n":5}`)

	n, err := q.PurgeBodies(ctx, c.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n, int64(1); got != want {
		t.Fatalf("purged=%d, want %d", got, want)
	}
	if b := bodyOf(t, q, oldDone); b != nil {
		t.Fatalf("old done body=%q, want purged", b)
	}
	for _, id := range []string{failed, parked, newDone, pending} {
		if b := bodyOf(t, q, id); len(b) == 0 {
			t.Fatalf("body of %s was purged", id)
		}
	}
	if d, err := q.Detail(ctx, oldDone); err != nil || d.BodyBytes != -1 {
		t.Fatalf("detail of purged entry: %v %+v", err, d)
	}
	// The identity stays: the same delivery is a replay of the done entry,
	// another body under its id a conflict; neither creates an entry.
	for _, body := range []string{`{"n":1}`, `{"n":9}`} {
		r, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:r", EventID: "old-done",
			Digest: dedupe.Digest([]byte(body)), Body: []byte(body)})
		if err != nil || r.Created || r.QueueID != oldDone || r.Status != touba.StatusDone {
			t.Fatalf("redelivery after purge: %v %+v", err, r)
		}
	}
	// A second pass finds nothing more.
	if n, err := q.PurgeBodies(ctx, c.Now().Add(-24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second purge: %d %v", n, err)
	}
}

// TestPurgeBodiesChunks purges more bodies than one chunk holds.
func TestPurgeBodiesChunks(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	q := openAt(t, c)
	const n = 1234
	for i := 0; i < n; i++ {
		put(t, q, "e"+time.Duration(i).String(), "body")
	}
	for {
		got, err := q.Lease(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, d := range got {
			if err := q.Finish(ctx, d.QueueID, leaseToken(t, q, d.QueueID), touba.StatusDone, "", ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Add(time.Hour)
	purged, err := q.PurgeBodies(ctx, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := purged, int64(n); got != want {
		t.Fatalf("purged=%d, want %d", got, want)
	}
}

// TestRunRetentionPurgesOnStart checks the loop's first pass and that it
// stops with its context.
func TestRunRetentionPurgesOnStart(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	q := openAt(t, c)
	id := put(t, q, "a", "body")
	end(t, q, id, touba.StatusDone)
	c.Add(2 * time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan int64, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.RunRetention(ctx, time.Hour, func(n int64, err error) {
			if err != nil {
				t.Error(err)
			}
			reports <- n
		})
	}()
	select {
	case n := <-reports:
		if n != 1 {
			t.Fatalf("first pass purged %d, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no retention pass within 10s")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RunRetention did not stop with its context")
	}
	if b := bodyOf(t, q, id); b != nil {
		t.Fatalf("body=%q after retention", b)
	}
}

func TestRetentionEvery(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{time.Second, time.Second}, {time.Minute, 15 * time.Second}, {168 * time.Hour, time.Hour},
	} {
		if got := queue.RetentionEvery(c.in); got != c.want {
			t.Fatalf("RetentionEvery(%v)=%v, want %v", c.in, got, c.want)
		}
	}
}
