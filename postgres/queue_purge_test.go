package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/purgemarks"
)

// purged says whether entry id's body is gone.
func purged(t *testing.T, conn *pgx.Conn, id string) bool {
	t.Helper()
	var gone bool
	if err := conn.QueryRow(context.Background(), `SELECT body IS NULL FROM touba.entries WHERE queue_id = $1`, id).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	return gone
}

// A retention pass reads only the queue ids that can hold what became
// purgeable since the last pass, and yet purges every body it must: an
// old entry revived and ended since (its revival lowered the hour's
// mark), and one the last pass could not lock (purge_left). What the
// marks cannot see (an old entry ended by a node of the previous release
// between two raises) waits for the daily pass that reads every entry.
func TestPurgePassBoundedByTheMarks(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	const retention = 2 * time.Hour
	t0 := time.Now().Add(-72 * time.Hour).Truncate(time.Hour)
	clk := &testClock{t: t0.Add(-6 * time.Hour)}
	st := openNode(t, url, "n1", clk, 80*time.Second)
	conn := superConn(t, url)
	// Raises every half hour, as every node's every 10 s, so every hour
	// has its mark.
	tick := func(d time.Duration) {
		for end := clk.Now().Add(d); clk.Now().Before(end); {
			clk.Add(30 * time.Minute)
			if err := st.Queue.raiseFloor(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass := func() purgeRange {
		t.Helper()
		cutoff := clk.Now().Add(-retention)
		r, err := st.Queue.purgeRangeFor(ctx, cutoff, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Queue.purgePass(ctx, cutoff); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if err := st.Queue.raiseFloor(ctx); err != nil {
		t.Fatal(err)
	}
	// A delivery merged into a carrier accepted after it (below the
	// carrier's id, which the marks follow): it goes when its carrier ends.
	merged := ranEntries(t, st, "merged", 1, touba.StatusDone)[0] // accepted at t0-6h
	missed := ranEntries(t, st, "missed", 1, touba.StatusFailed)[0]
	clk.Add(time.Minute)
	revived := ranEntries(t, st, "revived", 1, touba.StatusFailed)[0]
	carrier := ranEntries(t, st, "carrier", 1, touba.StatusFailed)[0]
	mustExec(t, conn, `UPDATE touba.entries SET status = 'merged', merged_into = $2 WHERE queue_id = $1`, merged, carrier)
	tick(6*time.Hour - time.Minute)
	done := ranEntries(t, st, "done", 1, touba.StatusDone)[0] // at t0
	tick(3 * time.Hour)
	if r := pass(); !r.full {
		t.Fatalf("the first pass read %v, want every entry", r)
	}
	if !purged(t, conn, done) || purged(t, conn, revived) || purged(t, conn, merged) {
		t.Fatal("the first pass did not purge the done entry, or purged a failed one or one merged into it")
	}
	// t0+3h: the old failed entry replayed and ended between two raises;
	// the other one ended too, by hand, as a node of the previous release
	// would (no mark lowered).
	if _, err := st.Queue.Replay(ctx, []string{revived, carrier}, touba.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	// The replay lowered the hour's mark itself (a raise of the previous
	// release, which writes none, may come next).
	var mark string
	if err := conn.QueryRow(ctx, `SELECT floor FROM touba.purge_marks WHERE hour = $1`, purgemarks.Hour(clk.Now())).Scan(&mark); err != nil || mark > revived {
		t.Fatalf("the hour's mark after the replay of %s: %q, %v", revived, mark, err)
	}
	ds, err := st.Queue.Lease(ctx, 10)
	if err != nil || len(ds) != 2 || ds[0].QueueID != revived || ds[1].QueueID != carrier {
		t.Fatalf("lease after the replay: %v, %v", idsOf(ds), err)
	}
	for _, d := range ds {
		if err := st.Queue.Finish(ctx, d.QueueID, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, conn, `UPDATE touba.entries SET status = 'done', updated_at = $2 WHERE queue_id = $1`, missed, touba.FormatTime(clk.Now()))
	locked := ranEntries(t, st, "locked", 1, touba.StatusDone)[0] // at t0+3h
	// The locked entry is held through two passes, so that the second's
	// range no longer holds it.
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	mustExec(t, holder, `BEGIN`)
	mustExec(t, holder, `SELECT 1 FROM touba.entries WHERE queue_id = $1 FOR UPDATE`, locked)
	tick(3 * time.Hour)
	r := pass() // cutoff t0+4h
	if r.full || r.lo > revived || r.lo <= missed {
		t.Fatalf("second pass range %+v: want a bounded one from below the revived %s (its mark), above %s", r, revived, missed)
	}
	if !purged(t, conn, revived) || !purged(t, conn, carrier) {
		t.Fatal("the revived entries' bodies outlived the bounded pass")
	}
	if !purged(t, conn, merged) {
		t.Fatal("the delivery merged into the revived carrier, below the range, outlived the bounded pass (purge_left)")
	}
	if purged(t, conn, missed) || purged(t, conn, locked) {
		t.Fatal("the bounded pass purged an entry below its range, or a locked one")
	}
	tick(6 * time.Hour)
	pass()
	mustExec(t, holder, `ROLLBACK`)
	tick(6 * time.Hour)
	if r := pass(); r.full || r.lo <= locked {
		t.Fatalf("fourth pass range %+v: want a bounded one above the locked %s", r, locked)
	}
	if !purged(t, conn, locked) {
		t.Fatal("the entry a pass could not lock was not purged by a later one (purge_left)")
	}
	if purged(t, conn, missed) {
		t.Fatal("a bounded pass purged the entry below its range")
	}
	tick(purgemarks.FullEvery)
	if r := pass(); !r.full {
		t.Fatalf("a pass a day after the last full one read %+v, want every entry", r)
	}
	if !purged(t, conn, missed) {
		t.Fatal("the daily pass did not purge the entry the marks could not see")
	}
}
