package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// SPEC §8.1: no lock keeps two nodes' detaches of a range apart (a
// detach runs outside the maintenance lock, and a second node's pass
// freezes a frozen range again). A pass that found a partition attached
// and then, when it detaches it, finds it detached by the other, or left
// pending by the other's detach, goes on: the pass ends without an error,
// the partition, marked by the freeze, is dropped (a pending one after a
// later pass finalizes it), the done entries are forgotten and the failed
// ones stay. A pass that failed on it logged "history pass failed" (two
// real nodes with a busy lock did so, tests/history).
func TestDetachedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other func(t *testing.T, url, leaf string) // what the other node did to leaf
	}{
		{"detached", func(t *testing.T, url, leaf string) {
			mustExec(t, superConn(t, url), `ALTER TABLE touba.entries_live DETACH PARTITION touba.`+leaf+` CONCURRENTLY`)
		}},
		{"pending", leavePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			url := pgtest.New(t)
			clk := &testClock{t: time.Now()}
			window := 80 * time.Second
			st := openNode(t, url, "n1", clk, window)
			done := ranEntries(t, st, "done", 10, touba.StatusDone)
			failed := ranEntries(t, st, "failed", 2, touba.StatusFailed)
			clk.Add(3 * window)

			raced := ""
			beforeDetach = func(leaf string) {
				if raced == "" && strings.HasPrefix(leaf, "entries_") {
					raced = leaf
					tc.other(t, url, leaf)
				}
			}
			t.Cleanup(func() { beforeDetach = nil })
			rep, err := st.History().Prune(ctx, clk.Now().Add(-window))
			if err != nil || raced == "" {
				t.Fatalf("pass with %q %s by another meanwhile: %+v (%v), want it to go on", raced, tc.name, rep, err)
			}
			beforeDetach = nil
			prune(t, st, clk.Now().Add(-window))
			forgotten(t, st, done, "done")
			wantListed(t, st, touba.StatusFailed, failed)
			noOrphans(t, st)
			noneLeft(t, url)
			if h := halfForgotten(t, superConn(t, url)); len(h) > 0 {
				t.Fatalf("rows whose entry is gone: %v", h)
			}
		})
	}
}

// leavePending leaves leaf's detach pending, as another node's DETACH ...
// CONCURRENTLY does while it waits for older transactions (here one
// holding the parent open, and then cancelled while it waits, as a node
// that died there).
func leavePending(t *testing.T, url, leaf string) {
	t.Helper()
	ctx := context.Background()
	reader, detacher, watch := superConn(t, url), superConn(t, url), superConn(t, url)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM touba.entries_live`); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := detacher.Exec(ctx, `ALTER TABLE touba.entries_live DETACH PARTITION touba.`+leaf+` CONCURRENTLY`, pgx.QueryExecModeSimpleProtocol)
		ended <- err
	}()
	waitFor(t, 30*time.Second, func() bool {
		return count(t, watch, `SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhdetachpending`, "touba."+leaf) == 1
	}, "the other detach of "+leaf+" to be pending")
	mustExec(t, watch, `SELECT pg_cancel_backend($1)`, detacher.PgConn().PID())
	if err := <-ended; err == nil {
		t.Fatalf("the other detach of %s ended; want it cancelled while pending", leaf)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}
