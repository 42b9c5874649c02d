package queue_test

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

func enqueueKeyed(tb testing.TB, q *queue.Queue, eventID, key string, max int) string {
	tb.Helper()
	r, err := q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:t", EventID: eventID,
		Digest: dedupe.Digest([]byte(eventID)), Body: []byte(eventID), ConcKey: key, ConcMax: max})
	if err != nil || !r.Created {
		tb.Fatalf("enqueue %s: %v %+v", eventID, err, r)
	}
	return r.QueueID
}

// leaseIDs leases up to 100 entries and returns their event ids, sorted.
func leaseIDs(tb testing.TB, q *queue.Queue) []string {
	tb.Helper()
	got, err := q.Lease(context.Background(), 100)
	if err != nil {
		tb.Fatal(err)
	}
	var ids []string
	for _, d := range got {
		ids = append(ids, d.EventID)
	}
	sort.Strings(ids)
	return ids
}

func wantLease(tb testing.TB, q *queue.Queue, want ...string) {
	tb.Helper()
	got := leaseIDs(tb, q)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		tb.Fatalf("leased %v, want %v", got, want)
	}
}

// TestKeyOrdering: with max 1 an entry never starts while an earlier entry
// of its key is pending, running, in backoff or parked; failed and done
// release the key; a replayed failed entry goes back ahead of the later
// ones without running beside one already running; and all of it holds
// across closing and reopening the file (a restart or a crash).
func TestKeyOrdering(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	now := time.Now()
	q := mustOpen(t, path, queue.Options{})
	finish := func(id, status string) {
		t.Helper()
		if err := q.Finish(ctx, id, leaseToken(t, q, id), status, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	replay := func(id string) {
		t.Helper()
		if res, err := q.Replay(ctx, []string{id}, touba.ReplayOptions{}); err != nil || res[0].From == "" {
			t.Fatalf("replay %s: %+v %v", id, res, err)
		}
	}
	reopen := func(at time.Time) {
		t.Helper()
		q.Close()
		q = mustOpen(t, path, queue.Options{Now: func() time.Time { return at }})
		if _, err := q.RequeueRunning(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a1 := enqueueKeyed(t, q, "a1", `"A"`, 1)
	b1 := enqueueKeyed(t, q, "b1", `"B"`, 1)
	a2 := enqueueKeyed(t, q, "a2", `"A"`, 1)
	a3 := enqueueKeyed(t, q, "a3", `"A"`, 1)
	u1 := enqueueKeyed(t, q, "u1", "", 0)

	wantLease(t, q, "a1", "b1", "u1") // a2, a3 wait behind a1
	if n, err := q.HeldKeys(ctx); err != nil || n != 1 {
		t.Fatalf("held keys=%d %v, want 1", n, err)
	}
	held, err := q.List(ctx, touba.EntryFilter{Held: true})
	if err != nil || len(held) != 2 || held[0].EventID != "a2" || held[0].ConcKey != `"A"` || !held[0].Held {
		t.Fatalf("held list=%+v %v, want a2 and a3", held, err)
	}
	finish(b1, touba.StatusDone)
	finish(u1, touba.StatusDone)

	// In backoff, a1 still holds its key, across a restart too.
	if err := q.Retry(ctx, a1, leaseToken(t, q, a1), now.Add(time.Hour), "X", "later"); err != nil {
		t.Fatal(err)
	}
	wantLease(t, q)
	reopen(now.Add(2 * time.Hour))
	wantLease(t, q, "a1")
	// Parked, it holds the key until an operator replays it.
	finish(a1, touba.StatusParked)
	wantLease(t, q)
	replay(a1)
	wantLease(t, q, "a1")
	// Failed, it lets the next one go.
	finish(a1, touba.StatusFailed)
	wantLease(t, q, "a2")
	// A crash while a2 runs: a2 comes back first, a3 still waits.
	reopen(now.Add(2 * time.Hour))
	wantLease(t, q, "a2")
	finish(a2, touba.StatusDone)
	wantLease(t, q, "a3")
	// a1 replayed from failed while a3 runs: it is next, not beside a3,
	// and a later a4 waits behind both.
	replay(a1)
	a4 := enqueueKeyed(t, q, "a4", `"A"`, 1)
	wantLease(t, q)
	finish(a3, touba.StatusDone)
	wantLease(t, q, "a1")
	finish(a1, touba.StatusDone)
	wantLease(t, q, "a4")
	finish(a4, touba.StatusDone)
	if n, err := q.HeldKeys(ctx); err != nil || n != 0 {
		t.Fatalf("held keys=%d %v, want 0", n, err)
	}
}

// TestKeyMax: max N lets N entries of a key run at once, the next as one
// ends.
func TestKeyMax(t *testing.T) {
	ctx := context.Background()
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{})
	k1 := enqueueKeyed(t, q, "k1", "7", 2)
	enqueueKeyed(t, q, "k2", "7", 2)
	enqueueKeyed(t, q, "k3", "7", 2)
	enqueueKeyed(t, q, "k4", "7", 2)
	wantLease(t, q, "k1", "k2")
	if err := q.Finish(ctx, k1, leaseToken(t, q, k1), touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	wantLease(t, q, "k3")
}
