package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/purgemarks"
)

// floorNow is the floor as stored ("" for NULL).
func floorNow(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var f *string
	if err := conn.QueryRow(context.Background(), readFloor).Scan(&f); err != nil {
		t.Fatal(err)
	}
	if f == nil {
		return ""
	}
	return *f
}

// leafOf is the partition holding entry id.
func leafOf(t *testing.T, conn *pgx.Conn, id string) string {
	t.Helper()
	var name string
	if err := conn.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM touba.entries WHERE queue_id = $1`,
		id).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(name, "touba.")
}

// claimPlanText is EXPLAIN's plan of the claim of a trigger's pick with
// bound, as a generic plan (which names every partition it was not
// pruned of when planned).
func claimPlanText(t *testing.T, conn *pgx.Conn, st *Store, bound string) string {
	t.Helper()
	ctx := context.Background()
	mustExec(t, conn, `BEGIN`)
	defer mustExec(t, conn, `ROLLBACK`)
	mustExec(t, conn, `SET LOCAL plan_cache_mode = force_generic_plan`)
	mustExec(t, conn, `PREPARE floor_claim(text, int, text, text) AS `+st.Queue.claimSQL(pickTrigger, bound, 35))
	defer mustExec(t, conn, `DEALLOCATE floor_claim`)
	var plan string
	if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE floor_claim('x', 35, 'n1', 'trigger:t')`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// The lease's floor leaves the time partitions below it out of the
// claim's plan, and an entry below it made pending again (a replay) is
// leased by the next lease: the replay lowered the floor.
func TestLeaseFloorLeavesOldPartitionsOut(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	// The old entries hours before the database's clock, the new ones at
	// it: the floor is never above the database's clock less floorMargin.
	clk := &testClock{t: time.Now().Add(-5 * floorMargin)}
	st := openNode(t, url, "n1", clk, 80*time.Second)
	old := ranEntries(t, st, "old", 3, touba.StatusDone)
	failed := ranEntries(t, st, "failed", 1, touba.StatusFailed)[0]
	clk.Add(5 * floorMargin)
	var fresh []string
	for i := range 3 {
		r, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("new-%d", i), Digest: "d", Body: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, r.QueueID)
	}
	if err := st.Queue.raiseFloor(ctx); err != nil {
		t.Fatal(err)
	}
	st.db.hot.load(ctx)
	conn := superConn(t, url)
	floor := floorNow(t, conn)
	bound := st.db.hot.floorBound(&floor)
	if bound == "" || bound <= failed || bound > fresh[0] {
		t.Fatalf("floor %q, bound %q: want a bound above the old entries (%s) and at or below the new (%s)", floor, bound, failed, fresh[0])
	}
	oldLeaf, newLeaf := leafOf(t, conn, old[0]), leafOf(t, conn, fresh[0])
	if oldLeaf == newLeaf || oldLeaf != leafOf(t, conn, failed) {
		t.Fatalf("old entries in %s and %s, new in %s: want the old ones apart", oldLeaf, leafOf(t, conn, failed), newLeaf)
	}
	// The guard: unbounded, the plan names the old partition.
	if plan := claimPlanText(t, conn, st, ""); !strings.Contains(plan, oldLeaf) {
		t.Fatalf("the unbounded claim's plan does not name %s: %s", oldLeaf, plan)
	}
	if plan := claimPlanText(t, conn, st, bound); strings.Contains(plan, oldLeaf) || !strings.Contains(plan, newLeaf) ||
		!strings.Contains(plan, "entries_kept") {
		t.Fatalf("the bounded claim's plan names %s, or not %s and entries_kept: %s", oldLeaf, newLeaf, plan)
	}
	// The reads outside a lease take the same bound.
	if refs, err := st.Queue.ReadyTriggers(ctx); err != nil || len(refs) != 1 || refs[0] != "trigger:t" {
		t.Fatalf("ready triggers: %v, %v", refs, err)
	}
	if _, ok, err := st.Queue.NextWake(ctx); err != nil || ok {
		t.Fatalf("next wake with no waiting entry: %v, %v", ok, err)
	}
	ds, err := st.Queue.Lease(ctx, 10)
	if err != nil || len(ds) != len(fresh) {
		t.Fatalf("lease: %d entries, %v; want the %d new", len(ds), err, len(fresh))
	}
	if _, err := st.Queue.Replay(ctx, []string{failed}, touba.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	if f := floorNow(t, conn); f > failed {
		t.Fatalf("floor %q after the replay of %s", f, failed)
	}
	ds, err = st.Queue.Lease(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].QueueID != failed {
		t.Fatalf("lease after the replay: %v, %v; want the replayed %s", idsOf(ds), err, failed)
	}
	// Running, it keeps the floor down at the next raise; ended, it no
	// longer does.
	if err := st.Queue.raiseFloor(ctx); err != nil {
		t.Fatal(err)
	}
	if f := floorNow(t, conn); f > failed {
		t.Fatalf("floor %q raised past the running %s", f, failed)
	}
	if err := st.Queue.Finish(ctx, failed, ds[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := st.Queue.raiseFloor(ctx); err != nil {
		t.Fatal(err)
	}
	if f := floorNow(t, conn); f != floor {
		t.Fatalf("floor %q after the revived entry ended, want %q again", f, floor)
	}
	// A resume lowers it too.
	if _, err := st.Queue.Resume(ctx, touba.ResumeRequest{QueueID: old[1], Steps: []string{"s1"}}); err != nil {
		t.Fatal(err)
	}
	if f := floorNow(t, conn); f > old[1] {
		t.Fatalf("floor %q after the resume of %s", f, old[1])
	}
	ds, err = st.Queue.Lease(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].QueueID != old[1] {
		t.Fatalf("lease after the resume: %v, %v; want the resumed %s", idsOf(ds), err, old[1])
	}
}

// A node whose clock runs ahead raises the floor no higher than the
// database's clock less floorMargin, so the entries of the other nodes,
// whose clocks are right, stay above it.
func TestRaiseFloorNotPastTheDatabaseClock(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now().Add(5 * floorMargin)}
	st := openNode(t, url, "ahead", clk, 80*time.Second)
	before := time.Now()
	if err := st.Queue.raiseFloor(ctx); err != nil {
		t.Fatal(err)
	}
	f := floorNow(t, superConn(t, url))
	if ms, ok := msOf(f); !ok || ms > time.Now().Add(-floorMargin).UnixMilli() || ms < before.Add(-floorMargin-time.Minute).UnixMilli() {
		t.Fatalf("floor %q raised by a node 5 h ahead, want the database's clock less %v", f, floorMargin)
	}
	// The row deleted by hand: leases go on unbounded, the next raise puts
	// it back.
	conn := superConn(t, url)
	mustExec(t, conn, `DELETE FROM touba.pick_floor`)
	if _, err := st.Queue.Lease(ctx, 1); err != nil {
		t.Fatalf("lease without the floor's row: %v", err)
	}
	for range 2 { // one puts the row back, the next computes it
		if err := st.Queue.raiseFloor(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if floorNow(t, conn) == "" {
		t.Fatal("the raises did not put the floor's row back")
	}
}

// A raise that begins while a revival's transaction holds the floor's row
// waits for it and reads the revived entry: the floor it writes is not
// above it.
func TestRaiseFloorWaitsForRevival(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now().Add(-5 * floorMargin)}
	st := openNode(t, url, "n1", clk, 80*time.Second)
	failed := ranEntries(t, st, "failed", 1, touba.StatusFailed)[0]
	clk.Add(5 * floorMargin)
	if err := st.Queue.raiseFloor(ctx); err != nil {
		t.Fatal(err)
	}
	conn := superConn(t, url)
	if f := floorNow(t, conn); f <= failed {
		t.Fatalf("floor %q, want it above the failed %s", f, failed)
	}
	tx, err := st.db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE touba.entries SET status = 'pending' WHERE queue_id = $1`, failed); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, lowerFloorSQL, []string{failed}, purgemarks.Hour(clk.Now())); err != nil {
		t.Fatal(err)
	}
	raised := make(chan error, 1)
	go func() { raised <- st.Queue.raiseFloor(ctx) }()
	waitFor(t, 10*time.Second, func() bool {
		return count(t, conn, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%touba.pick_floor%'`) > 0
	}, "the raise to wait for the floor's row")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-raised; err != nil {
		t.Fatal(err)
	}
	if f := floorNow(t, conn); f > failed {
		t.Fatalf("floor %q after a raise that waited for the revival of %s", f, failed)
	}
}

// An unfinished entry a pass moved to entries_kept (a trigger paused past
// the window, a wait longer than it) keeps its old queue id: the floor is
// not raised past it, so a lease still takes it and the next wake still
// reads it.
func TestLeaseFloorCoversKeptEntries(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now().Add(-5 * floorMargin)}
	st := openNode(t, url, "n1", clk, 80*time.Second)
	var old []string
	for i := range 2 {
		r, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("kept-%d", i), Digest: "d", Body: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, r.QueueID)
	}
	clk.Add(5 * floorMargin)
	conn := superConn(t, url)
	// As a pass moves them: the older one waiting, the other pending as it
	// is (each then the lowest of its status, so that each probe counts).
	waiting, pending := old[0], old[1]
	wake := touba.FormatTime(time.Now().Add(-time.Second))
	mustExec(t, conn, `UPDATE touba.entries SET kept = true, status = 'waiting', wake_at = $2 WHERE queue_id = $1`, waiting, wake)
	mustExec(t, conn, `UPDATE touba.entries SET kept = true WHERE queue_id = $1`, pending)
	if leafOf(t, conn, pending) != "entries_kept" || leafOf(t, conn, waiting) != "entries_kept" {
		t.Fatalf("%s or %s not in entries_kept", pending, waiting)
	}
	r, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "new", Digest: "d", Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Queue.raiseFloor(ctx); err != nil {
		t.Fatal(err)
	}
	st.db.hot.load(ctx)
	if f := floorNow(t, conn); f > waiting {
		t.Fatalf("floor %q raised past the kept waiting %s", f, waiting)
	}
	if at, ok, err := st.Queue.NextWake(ctx); err != nil || !ok || touba.FormatTime(at) != wake {
		t.Fatalf("next wake %v, %v, %v; want the kept waiting entry's %s", at, ok, err, wake)
	}
	ds, err := st.Queue.Lease(ctx, 10)
	if err != nil || len(ds) != 2 || ds[0].QueueID != pending || ds[1].QueueID != r.QueueID {
		t.Fatalf("lease: %v, %v; want the kept %s and the new %s", idsOf(ds), err, pending, r.QueueID)
	}
}
