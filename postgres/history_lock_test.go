package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// wantListed fails t unless every entry of ids is in the queue with its
// status and its effect.
func wantListed(t *testing.T, st *Store, status string, ids []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		d, err := st.Queue.Get(ctx, id)
		if err != nil || d == nil || d.Status != status {
			t.Fatalf("%s entry %s: %+v (%v), want it listed", status, id, d, err)
		}
		if e, err := st.Journal.Get(ctx, id, id+":s1"); err != nil || e == nil {
			t.Fatalf("effect of %s entry %s: %+v (%v)", status, id, e, err)
		}
	}
}

// noOrphans fails t when a detached table of a partition is left.
func noOrphans(t *testing.T, st *Store) {
	t.Helper()
	os, err := orphans(context.Background(), st.db.pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(os) > 0 {
		t.Fatalf("detached tables left: %v", os)
	}
}

// Issue 42: a pass whose freeze cannot take the maintenance lock (another
// node's pass, or an insert creating its partition, holds it) freezes
// nothing, so it detaches nothing: it stops, counts the skip, and the
// failed and parked entries of the range stay listed. A pass that
// detached the range anyway left them in tables nothing reads.
func TestFreezeWithoutLockDetachesNothing(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now()}
	window := 80 * time.Second
	st := openNode(t, url, "n1", clk, window)
	done := ranEntries(t, st, "done", 10, touba.StatusDone)
	failed := ranEntries(t, st, "failed", 3, touba.StatusFailed)
	parked := ranEntries(t, st, "parked", 2, touba.StatusParked)
	clk.Add(3 * window)

	peer := superConn(t, url)
	held := false
	beforeFreeze = func() {
		if !held {
			held = true
			mustExec(t, peer, `SELECT pg_advisory_lock($1)`, maintLock)
		}
	}
	t.Cleanup(func() { beforeFreeze = nil })
	rep, err := st.History().Prune(ctx, clk.Now().Add(-window))
	if err != nil {
		t.Fatal(err)
	}
	if !held || rep.Skipped == 0 || !rep.More || rep.Entries != 0 {
		t.Fatalf("pass with the lock held at its freeze: %+v (lock taken: %v), want it skipped with more left", rep, held)
	}
	wantListed(t, st, touba.StatusFailed, failed)
	wantListed(t, st, touba.StatusParked, parked)
	noOrphans(t, st)

	mustExec(t, peer, `SELECT pg_advisory_unlock($1)`, maintLock)
	rep, err = st.History().Prune(ctx, clk.Now().Add(-window))
	if err != nil || rep.Entries != int64(len(done)) || rep.Skipped != 0 {
		t.Fatalf("next pass: %+v (%v), want the %d done entries forgotten", rep, err, len(done))
	}
	wantListed(t, st, touba.StatusFailed, failed)
	wantListed(t, st, touba.StatusParked, parked)
	noOrphans(t, st)
}

// Issue 42: partitions an earlier build detached without freezing them
// (their failed entries unlisted) are attached again when a node starts,
// their entries listed, and the next pass forgets only what the rule
// lets go.
func TestOrphanedPartitionsAttachedAgain(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now()}
	window := 80 * time.Second
	st := openNode(t, url, "n1", clk, window)
	done := ranEntries(t, st, "done", 10, touba.StatusDone)
	failed := ranEntries(t, st, "failed", 3, touba.StatusFailed)
	clk.Add(3 * window)
	ranges, err := pastRanges(ctx, st.db.pool, clk.Now().Add(-window))
	if err != nil || len(ranges) == 0 {
		t.Fatalf("past ranges: %v (%v)", ranges, err)
	}
	// What the earlier build did: each leaf detached, none frozen.
	for _, r := range ranges {
		for _, tb := range ptables {
			if r.leaves[tb.name] != "" {
				mustExec(t, superConn(t, url), `ALTER TABLE touba.`+tb.rangeParent()+` DETACH PARTITION touba.`+r.leaves[tb.name]+` CONCURRENTLY`)
			}
		}
	}
	if d, err := st.Queue.Get(ctx, failed[0]); err != nil || d != nil {
		t.Fatalf("failed entry in a detached table: %+v (%v); the test's setup did not hide it", d, err)
	}
	if rep, err := st.History().Storage(ctx, clk.Now().Add(-window)); err != nil || rep.Note == "" {
		t.Fatalf("storage with detached tables: %+v (%v), want a note naming them", rep, err)
	}
	st.Close()

	st = openNode(t, url, "n2", clk, window)
	noOrphans(t, st)
	wantListed(t, st, touba.StatusFailed, failed)
	wantListed(t, st, touba.StatusDone, done)
	rep, err := st.History().Prune(ctx, clk.Now().Add(-window))
	if err != nil || rep.Entries != int64(len(done)) {
		t.Fatalf("pass after the start: %+v (%v), want the %d done entries forgotten", rep, err, len(done))
	}
	wantListed(t, st, touba.StatusFailed, failed)
	noOrphans(t, st)
}

// testLog writes a node's log to the test's.
func testLog(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}
