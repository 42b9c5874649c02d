package queue

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/purgemarks"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

type purgeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *purgeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *purgeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ran accepts a delivery of ref and runs it to status, at the clock's
// time; it returns its queue id.
func ran(t *testing.T, q *Queue, ref, id, status string) string {
	t.Helper()
	ctx := context.Background()
	r, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: ref, EventID: id, Digest: "d-" + id, Body: []byte(`{"id":"` + id + `"}`)})
	if err != nil || !r.Created {
		t.Fatalf("enqueue %s: %v %+v", id, err, r)
	}
	if status == touba.StatusPending {
		return r.QueueID
	}
	ds, err := q.Lease(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].QueueID != r.QueueID {
		t.Fatalf("lease %s: %v %v", id, err, ds)
	}
	if err := q.Finish(ctx, r.QueueID, ds[0].LeaseToken, status, "", ""); err != nil {
		t.Fatal(err)
	}
	return r.QueueID
}

func purgedBody(t *testing.T, q *Queue, id string) bool {
	t.Helper()
	var gone bool
	if err := q.db.Read.QueryRow(`SELECT body IS NULL FROM entries WHERE queue_id = ?`, id).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	return gone
}

func execOp(t testing.TB, q *Queue, stmt string, args ...any) {
	t.Helper()
	if err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, stmt, args...)
		return 0, err
	}); err != nil {
		t.Fatal(err)
	}
}

// A retention pass reads only the queue ids that can hold what became
// purgeable since the last pass, and yet purges every body it must: an
// old entry revived and ended since (its revival lowered the hour's
// mark), and one an earlier pass kept while a wait could still read it
// (purge_left). What the marks cannot see (an old entry ended by the
// previous release) waits for the daily pass that reads every entry.
func TestPurgePassBoundedByTheMarks(t *testing.T) {
	ctx := context.Background()
	const retention = 2 * time.Hour
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	c := &purgeClock{t: t0.Add(-6 * time.Hour)}
	// Queue ids are the acceptance time: from the same clock.
	ids := &uuidv7.Generator{Now: c.Now}
	q, err := Open(ctx, filepath.Join(t.TempDir(), "q.sqlite"), Options{Now: c.Now, NewID: ids.New})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	tick := func(d time.Duration) {
		for end := c.Now().Add(d); c.Now().Before(end); {
			c.Add(markEvery)
			if err := q.sampleMark(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass := func() purgeRange {
		t.Helper()
		cutoff := c.Now().Add(-retention)
		r, err := q.purgeRangeFor(ctx, cutoff, c.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.purgePass(ctx, cutoff); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if err := q.sampleMark(ctx); err != nil {
		t.Fatal(err)
	}
	// A delivery merged into a carrier accepted after it (so below its
	// carrier's id, which the marks follow): it goes when its carrier ends.
	merged := ran(t, q, "trigger:g", "merged", touba.StatusDone) // t0-6h
	missed := ran(t, q, "trigger:r", "missed", touba.StatusFailed)
	c.Add(time.Minute)
	revived := ran(t, q, "trigger:r", "revived", touba.StatusFailed)
	carrier := ran(t, q, "trigger:g", "carrier", touba.StatusFailed)
	execOp(t, q, `UPDATE entries SET status = 'merged', merged_into = ? WHERE queue_id = ?`, carrier, merged)
	tick(6*time.Hour - time.Minute)
	done := ran(t, q, "trigger:r", "done", touba.StatusDone) // t0
	tick(3 * time.Hour)
	if r := pass(); !r.full {
		t.Fatalf("the first pass read %+v, want every entry", r)
	}
	if !purgedBody(t, q, done) || purgedBody(t, q, revived) || purgedBody(t, q, merged) {
		t.Fatal("the first pass did not purge the done entry, or purged a failed one or one merged into it")
	}
	// t0+3h: the old failed entry replayed and ended between two samples;
	// the other one ended by the previous release (no mark lowered).
	if _, err := q.Replay(ctx, []string{revived, carrier}, touba.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Lease(ctx, 10)
	if err != nil || len(ds) != 2 || ds[0].QueueID != revived || ds[1].QueueID != carrier {
		t.Fatalf("lease after the replay: %v, %v", ds, err)
	}
	for _, d := range ds {
		if err := q.Finish(ctx, d.QueueID, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	execOp(t, q, `UPDATE entries SET status = 'done', updated_at = ? WHERE queue_id = ?`, touba.FormatTime(c.Now()), missed)
	// A done entry whose body a wait may still read: it holds an unconsumed
	// offer for a trigger with a pending entry.
	kept := ran(t, q, "trigger:r", "kept", touba.StatusDone)
	waiter := ran(t, q, "trigger:w", "waiter", touba.StatusPending)
	execOp(t, q, `INSERT INTO offers (key, value, queue_id, created_at) VALUES ('trigger:w#k', 'v', ?, ?)`, kept, touba.FormatTime(c.Now()))
	tick(3 * time.Hour)
	r := pass() // cutoff t0+4h
	if r.full || r.lo > revived || r.lo <= missed {
		t.Fatalf("second pass range %+v: want a bounded one from below the revived %s (its mark), above %s", r, revived, missed)
	}
	if !purgedBody(t, q, revived) || !purgedBody(t, q, carrier) {
		t.Fatal("the revived entries' bodies outlived the bounded pass")
	}
	if !purgedBody(t, q, merged) {
		t.Fatal("the delivery merged into the revived carrier, below the range, outlived the bounded pass (purge_left)")
	}
	if purgedBody(t, q, missed) || purgedBody(t, q, kept) {
		t.Fatal("the bounded pass purged an entry below its range, or one a wait may read")
	}
	// The waiting trigger's entry ends: the kept body may go, but by then
	// it is below the passes' range.
	tick(6 * time.Hour)
	pass()
	ds, err = q.Lease(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].QueueID != waiter {
		t.Fatalf("lease of the waiter: %v, %v", ds, err)
	}
	if err := q.Finish(ctx, waiter, ds[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	tick(6 * time.Hour)
	if r := pass(); r.full || r.lo <= kept {
		t.Fatalf("fourth pass range %+v: want a bounded one above the kept %s", r, kept)
	}
	if !purgedBody(t, q, kept) {
		t.Fatal("the body an earlier pass kept was not purged once no wait could read it (purge_left)")
	}
	if purgedBody(t, q, missed) {
		t.Fatal("a bounded pass purged the entry below its range")
	}
	tick(purgemarks.FullEvery)
	if r := pass(); !r.full {
		t.Fatalf("a pass a day after the last full one read %+v, want every entry", r)
	}
	if !purgedBody(t, q, missed) {
		t.Fatal("the daily pass did not purge the entry the marks could not see")
	}
	// An hour without its mark (the daemon stopped then): the next pass
	// reads every entry.
	tick(3 * time.Hour)
	execOp(t, q, `DELETE FROM purge_marks WHERE hour = ?`, purgemarks.Hour(c.Now().Add(-retention)))
	if r := pass(); !r.full {
		t.Fatalf("a pass with a mark missing read %+v, want every entry", r)
	}
	var left int
	if err := q.db.Read.QueryRow(`SELECT COUNT(*) FROM purge_left`).Scan(&left); err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("purge_left holds %d ids after every body went", left)
	}
}

// BenchmarkPurgePass is one retention pass over a queue holding n done
// entries whose bodies an earlier pass purged (the state --history 90 days
// and --retention 7 days leave) and nothing new to purge: a pass that
// reads every entry (full, as every pass did before the marks), and one
// the marks bound, as a daemon that sampled them leaves them.
func BenchmarkPurgePass(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, full := range []bool{true, false} {
			b.Run(fmt.Sprintf("entries=%d/full=%v", n, full), func(b *testing.B) {
				now := time.Now()
				q, err := Open(context.Background(), filepath.Join(b.TempDir(), "q.sqlite"), Options{Now: func() time.Time { return now }})
				if err != nil {
					b.Fatal(err)
				}
				defer q.Close()
				// n entries over the 90 days before now, done as they came.
				start := now.Add(-90 * 24 * time.Hour).UnixMilli()
				step := 90 * 24 * time.Hour.Milliseconds() / int64(n)
				err = q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
					_, err := tx.ExecContext(ctx, `WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < ?1)
						INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status, updated_at)
						SELECT printf('%08x-%04x-7000-8000-%012x', (?2 + i * ?3) >> 16, (?2 + i * ?3) & 65535, i), 'trigger:r', 'h-' || i, 'd',
							NULL, '{}', '', '2026-01-01T00:00:00.000Z', 'done', '2026-01-01T00:00:00.000Z' FROM g`, n-1, start, step)
					return 0, err
				})
				if err != nil {
					b.Fatal(err)
				}
				cutoff := now.Add(-168 * time.Hour)
				if !full { // the last pass an hour ago, a mark for each hour since
					for h := cutoff.Add(-3 * time.Hour); !h.After(now); h = h.Add(time.Hour) {
						if err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
							return 0, lowerMark(ctx, tx, h, "")
						}); err != nil {
							b.Fatal(err)
						}
					}
					execOp(b, q, `INSERT INTO purge_state (one, cutoff, full_at) VALUES (1, ?, ?)`,
						touba.FormatTime(cutoff.Add(-time.Hour)), touba.FormatTime(now.Add(-time.Hour)))
				}
				b.ResetTimer()
				for range b.N {
					r, err := q.purgeRangeFor(context.Background(), cutoff, now)
					if err != nil || r.full != full {
						b.Fatalf("range %+v, %v", r, err)
					}
					if _, err := q.purgePass(context.Background(), cutoff); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
