package queue_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite/queue"
)

var (
	waitKey   = touba.WaitKey("trigger:a", "await")
	cancelKey = touba.CancelKey("trigger:a", 0)
)

// putWith enqueues a new delivery of ref with edit's match values.
func putWith(tb testing.TB, q *queue.Queue, ref, id string, edit func(*touba.Delivery)) touba.EnqueueResult {
	tb.Helper()
	d := &touba.Delivery{TriggerRef: ref, EventID: id, Digest: dedupe.Digest([]byte(id)), Body: []byte(id)}
	if edit != nil {
		edit(d)
	}
	r, err := q.Enqueue(context.Background(), d)
	if err != nil || !r.Created {
		tb.Fatalf("enqueue %s: %v %+v", id, err, r)
	}
	return r
}

// leaseOne leases the oldest due entry, which must be want.
func leaseOne(tb testing.TB, q *queue.Queue, want string) int64 {
	tb.Helper()
	got, err := q.Lease(context.Background(), 1)
	if err != nil || len(got) != 1 || got[0].QueueID != want {
		tb.Fatalf("lease: %v %+v, want %s", err, got, want)
	}
	return got[0].LeaseToken
}

// rows counts the rows of table in the file at path.
func rows(tb testing.TB, path, table string) int {
	tb.Helper()
	db, err := sqlitex.OpenReadOnly(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestPurgePrunesWaits checks that retention removes the waits, offers and
// cancel keys of the entries whose bodies it purges, and only theirs.
func TestPurgePrunesWaits(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "q.sqlite")
	q := mustOpen(t, path, queue.Options{Now: c.Now})
	withKey := func(d *touba.Delivery) { d.CancelKeys = []touba.MatchValue{{Key: cancelKey, Value: "1"}} }

	// a waits, b1's offer matches it, both end done; b2's offer stays.
	a := putWith(t, q, "trigger:a", "a", withKey).QueueID
	tok := leaseOne(t, q, a)
	if w, err := q.BeginWait(ctx, tok, touba.Wait{QueueID: a, StepID: "await", Kind: touba.WaitEvent, Key: waitKey, Value: "1"}); err != nil || w.State != touba.WaitOpen {
		t.Fatalf("begin wait: %+v, %v", w, err)
	}
	offer := func(d *touba.Delivery) { d.Offers = []touba.MatchValue{{Key: waitKey, Value: "1"}} }
	b1 := putWith(t, q, "trigger:b", "b1", offer)
	if len(b1.Matched) != 1 || b1.Matched[0] != a {
		t.Fatalf("b1 matched %v, want [%s]", b1.Matched, a)
	}
	b2 := putWith(t, q, "trigger:b", "b2", offer).QueueID
	for _, id := range []string{a, b1.QueueID, b2} {
		end(t, q, id, touba.StatusDone)
	}
	// A later entry keeps its rows.
	c.Add(48 * time.Hour)
	keep := putWith(t, q, "trigger:a", "keep", withKey).QueueID
	for table, want := range map[string]int{"waits": 1, "offers": 2, "cancel_keys": 2} {
		if n := rows(t, path, table); n != want {
			t.Fatalf("%s before the purge: %d rows, want %d", table, n, want)
		}
	}
	// b2's offer is not consumed and keep, an unfinished entry of the
	// awaiting trigger, may still wait for it: b2 stays (SPEC §2.3).
	if n, err := q.PurgeBodies(ctx, c.Now().Add(-24*time.Hour)); err != nil || n != 2 {
		t.Fatalf("purge: %d, %v; want 2", n, err)
	}
	for table, want := range map[string]int{"waits": 0, "offers": 1, "cancel_keys": 1} {
		if n := rows(t, path, table); n != want {
			t.Fatalf("%s after the purge: %d rows, want %d", table, n, want)
		}
	}
	// The kept entry is still cancellable by its key.
	r := putWith(t, q, "trigger:b", "cancel", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancelKey, Value: "1"}}
	})
	if len(r.Cancelled) != 1 || r.Cancelled[0] != keep {
		t.Fatalf("cancelled %v, want [%s]", r.Cancelled, keep)
	}
}

// TestPendingCountThroughWaits checks that the in-memory pending count
// follows waits, wakes, matches, cancels, resumes and replays: it equals
// what a fresh open counts in the file.
func TestPendingCountThroughWaits(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "q.sqlite")
	q, err := queue.Open(ctx, path, queue.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { q.Close() }()
	check := func(step string) {
		t.Helper()
		var n int
		db, err := sqlitex.OpenReadOnly(path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM entries WHERE status = 'pending'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if q.Pending() != int64(n) {
			t.Fatalf("%s: pending %d in memory, %d in the file", step, q.Pending(), n)
		}
	}
	withKey := func(d *touba.Delivery) { d.CancelKeys = []touba.MatchValue{{Key: cancelKey, Value: "1"}} }
	sleeper := putWith(t, q, "trigger:a", "sleeper", withKey).QueueID
	at := c.Now().Add(time.Minute)
	if _, err := q.BeginWait(ctx, leaseOne(t, q, sleeper), touba.Wait{QueueID: sleeper, StepID: "nap", Kind: touba.WaitSleep, WakeAt: &at}); err != nil {
		t.Fatal(err)
	}
	check("sleeping")
	waiter := putWith(t, q, "trigger:a", "waiter", nil).QueueID
	if _, err := q.BeginWait(ctx, leaseOne(t, q, waiter), touba.Wait{QueueID: waiter, StepID: "await", Kind: touba.WaitEvent, Key: waitKey, Value: "1"}); err != nil {
		t.Fatal(err)
	}
	pending := putWith(t, q, "trigger:a", "pending", withKey).QueueID
	check("waiting")
	r := putWith(t, q, "trigger:b", "b", func(d *touba.Delivery) {
		d.Offers = []touba.MatchValue{{Key: waitKey, Value: "1"}}
		d.Cancels = []touba.MatchValue{{Key: cancelKey, Value: "1"}}
	})
	if len(r.Matched) != 1 || len(r.Cancelled) != 2 {
		t.Fatalf("matched %v, cancelled %v", r.Matched, r.Cancelled)
	}
	check("matched and cancelled")
	if got, _ := q.Get(ctx, pending); got.Status != touba.StatusCancelled {
		t.Fatalf("pending entry: %s, want cancelled", got.Status)
	}
	if res, err := q.Replay(ctx, []string{pending}, touba.ReplayOptions{}); err != nil || res[0].From != touba.StatusCancelled {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	check("replayed")
	if _, err := q.Resume(ctx, touba.ResumeRequest{QueueID: sleeper, Steps: []string{"nap"}}); err != nil {
		t.Fatal(err)
	}
	check("resumed")
	if _, err := q.Resume(ctx, touba.ResumeRequest{QueueID: sleeper, Steps: []string{"nap"}}); touba.ErrorCode(err) != touba.EEntryNotResumable {
		t.Fatalf("resume of a pending entry: %v", err)
	}
	check("resume refused")
	all, err := q.Lease(ctx, 10)
	if err != nil || len(all) != 4 {
		t.Fatalf("lease: %d, %v; want 4", len(all), err)
	}
	var tok int64
	for _, d := range all {
		if d.QueueID == waiter {
			tok = d.LeaseToken
		}
	}
	check("leased")
	at = c.Now().Add(time.Minute)
	if w, err := q.BeginWait(ctx, tok, touba.Wait{QueueID: waiter, StepID: "nap2", Kind: touba.WaitSleep, WakeAt: &at}); err != nil || w.State != touba.WaitOpen {
		t.Fatalf("second wait: %+v, %v", w, err)
	}
	c.Add(time.Minute)
	if n, err := q.Wake(ctx, c.Now(), 10); err != nil || n != 1 {
		t.Fatalf("wake: %d, %v", n, err)
	}
	check("woken")
	q.Close()
	q, err = queue.Open(ctx, path, queue.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	check("reopened")
}
