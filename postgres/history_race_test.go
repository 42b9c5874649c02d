package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// SPEC §8.1: no lock keeps two nodes' detaches of a range apart (a
// detach runs outside the maintenance lock, and a second node's pass
// freezes a frozen range again). A pass that found a partition attached
// and then finds it detached by the other when it detaches it goes on:
// the pass ends without an error, the partition, marked by the freeze, is
// dropped, the done entries are forgotten and the failed ones stay. A
// pass that failed on it logged "history pass failed" (two real nodes
// with a busy lock did so about once in three minutes, tests/history).
func TestDetachedMeanwhile(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now()}
	window := 80 * time.Second
	st := openNode(t, url, "n1", clk, window)
	done := ranEntries(t, st, "done", 10, touba.StatusDone)
	failed := ranEntries(t, st, "failed", 2, touba.StatusFailed)
	clk.Add(3 * window)

	peer := superConn(t, url)
	raced := ""
	beforeDetach = func(leaf string) {
		if raced == "" && strings.HasPrefix(leaf, "entries_") {
			raced = leaf
			// What the other node's pass does between this one's check
			// and its detach.
			mustExec(t, peer, `ALTER TABLE touba.entries_live DETACH PARTITION touba.`+leaf+` CONCURRENTLY`)
		}
	}
	t.Cleanup(func() { beforeDetach = nil })
	rep, err := st.History().Prune(ctx, clk.Now().Add(-window))
	if err != nil || raced == "" {
		t.Fatalf("pass with %q detached by another meanwhile: %+v (%v), want it to go on", raced, rep, err)
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
}
