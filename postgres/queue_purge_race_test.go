package postgres

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// Two nodes run their retention passes at once, round after round, while
// entries end on both and a peer holds a purgeable entry locked through a
// ten rounds' passes: no pass purges a body done within --retention, and
// every body done before a round's cutoff is gone after that round's
// passes (the held one after the first passes that follow its release), with
// bounded passes only: two passes that skip the row another holds, each
// recording its end beside the other's, leave nothing for the daily one.
func TestPurgePassesRacing(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	const retention = 2 * time.Hour
	clk := &testClock{t: time.Now().Add(-48 * time.Hour).Truncate(time.Hour)}
	nodes := []*Store{openNode(t, url, "n1", clk, 80*time.Second), openNode(t, url, "n2", clk, 80*time.Second)}
	conn := superConn(t, url)
	holder := superConn(t, url)
	raise := func() {
		for _, st := range nodes {
			if err := st.Queue.raiseFloor(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Marks for the hours the first bounded pass looks back on.
	for range 10 {
		raise()
		clk.Add(30 * time.Minute)
	}
	raise()
	ended := map[string]time.Time{}
	held := ""
	for round := range 18 {
		for i, st := range nodes {
			for _, id := range ranEntries(t, st, fmt.Sprintf("r%d-n%d", round, i), 2, touba.StatusDone) {
				ended[id] = clk.Now()
			}
		}
		clk.Add(30 * time.Minute)
		raise()
		cutoff := clk.Now().Add(-retention)
		if round > 0 {
			if r, err := nodes[round%2].Queue.purgeRangeFor(ctx, cutoff, clk.Now()); err != nil || r.full {
				t.Fatalf("round %d: range %+v, %v: want a bounded pass", round, r, err)
			}
		}
		// The newest entry that round 5's passes must purge (the first
		// with any) is held until round 15's, when it has long left their
		// range: only what a pass left (purge_left) brings it back.
		switch round {
		case 5:
			for id, at := range ended {
				if at.Before(cutoff) && !purged(t, conn, id) && id > held {
					held = id
				}
			}
			if held == "" {
				t.Fatal("nothing to hold: no entry done before round 5's cutoff")
			}
			mustExec(t, holder, `BEGIN`)
			mustExec(t, holder, `SELECT 1 FROM touba.entries WHERE queue_id = $1 FOR UPDATE`, held)
		case 15:
			mustExec(t, holder, `ROLLBACK`)
		}
		// Both passes start together (each has its own pool and
		// connections), so that their statements interleave.
		var wg, ready sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(nodes))
		for i, st := range nodes {
			wg.Add(1)
			ready.Add(1)
			go func() {
				defer wg.Done()
				ready.Done()
				<-start
				_, errs[i] = st.Queue.purgePass(ctx, cutoff)
			}()
		}
		ready.Wait()
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, node %d's pass: %v", round, i+1, err)
			}
		}
		var outlived []string
		for id, at := range ended {
			gone := purged(t, conn, id)
			if !at.Before(cutoff) && gone {
				t.Fatalf("round %d: %s, done at %s, purged by a pass with cutoff %s", round, id, at, cutoff)
			}
			if at.Before(cutoff) && !gone && (id != held || round >= 15) {
				outlived = append(outlived, id)
			}
		}
		if len(outlived) > 0 {
			sort.Strings(outlived)
			t.Fatalf("round %d: %d bodies done before the cutoff outlived both passes (%s held in rounds 5-14): %v",
				round, len(outlived), held, outlived)
		}
		if round >= 5 && round < 15 && purged(t, conn, held) {
			t.Fatalf("round %d: the held entry's body was purged", round)
		}
	}
}
