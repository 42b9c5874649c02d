package queue_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

func mustOpen(tb testing.TB, path string, opts queue.Options) *queue.Queue {
	tb.Helper()
	q, err := queue.Open(context.Background(), path, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { q.Close() })
	return q
}

func enqueue(tb testing.TB, q *queue.Queue, eventID, body string) touba.EnqueueResult {
	tb.Helper()
	r, err := q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:t", EventID: eventID,
		Digest: dedupe.Digest([]byte(body)), Body: []byte(body)})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{})
	a := enqueue(t, q, "a", "1")
	b := enqueue(t, q, "b", "2")
	if !a.Created || !b.Created || q.Pending() != 2 {
		t.Fatalf("created %v %v pending %d", a.Created, b.Created, q.Pending())
	}
	if again := enqueue(t, q, "a", "1"); again.Created || again.QueueID != a.QueueID || again.Status != touba.StatusPending {
		t.Fatalf("second enqueue of a: %+v", again)
	}
	got, err := q.Lease(ctx, 1)
	if err != nil || len(got) != 1 || got[0].QueueID != a.QueueID || got[0].Attempts != 1 || got[0].Status != touba.StatusRunning {
		t.Fatalf("lease: %v %+v", err, got)
	}
	if q.Pending() != 1 {
		t.Fatalf("pending=%d after lease, want 1", q.Pending())
	}
	// A retry not yet due is not leased; b is.
	if err := q.Retry(ctx, a.QueueID, leaseToken(t, q, a.QueueID), time.Now().Add(time.Hour), "HandlerFailed", "boom"); err != nil {
		t.Fatal(err)
	}
	got, _ = q.Lease(ctx, 10)
	if len(got) != 1 || got[0].QueueID != b.QueueID {
		t.Fatalf("lease after retry: %+v", got)
	}
	if err := q.Finish(ctx, b.QueueID, leaseToken(t, q, b.QueueID), touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, b.QueueID, leaseToken(t, q, b.QueueID), touba.StatusDone, "", ""); err == nil {
		t.Fatal("finishing an entry that is not running succeeded")
	}
	if r := enqueue(t, q, "b", "2"); r.Created || r.Status != touba.StatusDone {
		t.Fatalf("redelivery of a done entry: %+v", r)
	}
	res, err := q.Replay(ctx, []string{b.QueueID, "nope"}, touba.ReplayOptions{})
	if err != nil || res[0].From != "" || !strings.Contains(res[0].Reason, "done") || res[1].Reason != "no such entry" {
		t.Fatalf("replay of done/missing: %v %+v", err, res)
	}
}

func TestReplayAndRequeue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	q := mustOpen(t, path, queue.Options{})
	a := enqueue(t, q, "a", "1")
	b := enqueue(t, q, "b", "2")
	q.Lease(ctx, 2)
	if err := q.Finish(ctx, a.QueueID, leaseToken(t, q, a.QueueID), touba.StatusParked, touba.EEffectOutcomeUnknown, "x"); err != nil {
		t.Fatal(err)
	}
	res, err := q.Replay(ctx, []string{a.QueueID}, touba.ReplayOptions{})
	if err != nil || res[0].From != touba.StatusParked {
		t.Fatalf("replay parked: %v %+v", err, res)
	}
	e, _ := q.Get(ctx, a.QueueID)
	if e.Status != touba.StatusPending || e.QueueID != a.QueueID {
		t.Fatalf("after replay: %+v", e)
	}
	// b stays running as after a crash; reopening and RequeueRunning makes it pending.
	q.Close()
	q2 := mustOpen(t, path, queue.Options{})
	if q2.Pending() != 1 {
		t.Fatalf("pending at open=%d, want 1", q2.Pending())
	}
	n, err := q2.RequeueRunning(ctx)
	if err != nil || n != 1 || q2.Pending() != 2 {
		t.Fatalf("requeue: %v n=%d pending=%d", err, n, q2.Pending())
	}
	if e, _ := q2.Get(ctx, b.QueueID); e.Status != touba.StatusPending {
		t.Fatalf("b after requeue: %s", e.Status)
	}
}

// TestEnqueueRace: many callers of one identity, one entry.
func TestEnqueueRace(t *testing.T) {
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	ids := map[string]bool{}
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := enqueue(t, q, "same", "x")
			mu.Lock()
			defer mu.Unlock()
			ids[r.QueueID] = true
			if r.Created {
				created++
			}
		}()
	}
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Fatalf("created=%d distinct ids=%d, want 1 and 1", created, len(ids))
	}
	if st := q.QueueStats(); st.Commits >= 100 {
		t.Fatalf("%d commits for 100 concurrent enqueues: no group commit", st.Commits)
	}
}

func TestMaxPendingAnswersKnownIdentities(t *testing.T) {
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{MaxPending: 1})
	a := enqueue(t, q, "a", "1")
	if _, err := q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:t", EventID: "b", Digest: "d"}); err != touba.ErrQueueFull {
		t.Fatalf("err=%v, want ErrFull", err)
	}
	if r := enqueue(t, q, "a", "1"); r.QueueID != a.QueueID || r.Created {
		t.Fatalf("known identity at max pending: %+v", r)
	}
}

func TestPostponeGivesTheAttemptBack(t *testing.T) {
	ctx := context.Background()
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{})
	a := enqueue(t, q, "a", "1")
	q.Lease(ctx, 1)
	if err := q.Postpone(ctx, a.QueueID, leaseToken(t, q, a.QueueID), time.Now(), touba.EEffectInProgress, "held"); err != nil {
		t.Fatal(err)
	}
	got, _ := q.Lease(ctx, 1)
	if len(got) != 1 || got[0].Attempts != 1 {
		t.Fatalf("lease after postpone: %+v, want attempt 1 again", got)
	}
}

// leaseToken is the token queueID is leased under now, as its holder knows it.
func leaseToken(tb testing.TB, q *queue.Queue, queueID string) int64 {
	tb.Helper()
	d, err := q.Get(context.Background(), queueID)
	if err != nil || d == nil {
		return 0
	}
	return d.LeaseToken
}
