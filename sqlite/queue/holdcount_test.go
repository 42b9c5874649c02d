package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// asks is a lease plan of fixed asks.
type asks struct {
	list []touba.LeaseAsk
	next int
}

func (a *asks) Reset()                   { a.next = 0 }
func (a *asks) Free() int                { return 64 }
func (a *asks) Took(touba.LeaseAsk, int) {}
func (a *asks) Next() (touba.LeaseAsk, bool) {
	if a.next >= len(a.list) {
		return touba.LeaseAsk{}, false
	}
	a.next++
	return a.list[a.next-1], true
}

// scanHeld is what CountByTrigger and HeldRuns read before the counts: a
// GROUP BY of the entries themselves, the reference the counts must match.
func scanHeld(t *testing.T, db *sql.DB) (byTrigger, byHold map[string]map[string]int64) {
	t.Helper()
	byTrigger, byHold = map[string]map[string]int64{}, map[string]map[string]int64{}
	rows, err := db.Query(`SELECT trigger_ref, status, COUNT(*), SUM(held = 1 AND hold_on IS NULL),
		COUNT(hold_on), COUNT(CASE WHEN error_code = 'CircuitOpen' AND hold_on IS NOT NULL THEN 1 END) FROM entries
		WHERE status IN ('pending', 'running', 'waiting') GROUP BY trigger_ref, status`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ref, s string
		var n, key, holds, circuit int64
		if err := rows.Scan(&ref, &s, &n, &key, &holds, &circuit); err != nil {
			t.Fatal(err)
		}
		if byTrigger[ref] == nil {
			byTrigger[ref] = map[string]int64{}
		}
		byTrigger[ref][s] = n
		if s != touba.StatusPending {
			continue
		}
		for k, v := range map[string]int64{"held": key, touba.HeldSlot: holds - circuit, touba.HeldCircuit: circuit} {
			if v > 0 {
				byTrigger[ref][k] = v
			}
		}
	}
	rows.Close()
	rows, err = db.Query(`SELECT hold_on, trigger_ref, COUNT(*) FROM entries WHERE status = 'pending' AND hold_on IS NOT NULL GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var hold, ref string
		var n int64
		if err := rows.Scan(&hold, &ref, &n); err != nil {
			t.Fatal(err)
		}
		if byHold[hold] == nil {
			byHold[hold] = map[string]int64{}
		}
		byHold[hold][ref] = n
	}
	rows.Close()
	return byTrigger, byHold
}

func sameCounts(a, b map[string]map[string]int64) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int64) bool { return maps.Equal(x, y) })
}

// TestHeldCountsExactAfterAnySequence: random sequences of enqueues
// (keyed, with cancel keys, of a trigger the program later strands),
// leases of fresh and of handed-back entries, hand-backs on a slot or a
// circuit, finishes, retries, pauses and resumes, cancels, replays,
// strands and restarts: after each step, CountByTrigger and HeldRuns (read
// from hold_counts) equal a GROUP BY over the entries. The seed is logged;
// TOUBA_HOLD_SEED replays one.
func TestHeldCountsExactAfterAnySequence(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	open := func() *queue.Queue {
		q, err := queue.Open(ctx, path, queue.Options{MaxPending: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.RequeueRunning(ctx); err != nil {
			t.Fatal(err)
		}
		return q
	}
	q := open()
	defer func() { q.Close() }()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TOUBA_HOLD_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (TOUBA_HOLD_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	refs := []string{"trigger:a", "trigger:k", "trigger:gone"}
	holds := []string{"tool:x", "tool:y"}
	codes := []string{touba.ECircuitOpen, touba.EBindingBusy}
	cancelKey := touba.CancelKey("trigger:k", 0)
	running := map[string]int64{}
	seq := 0
	pick := func() (string, int64, bool) {
		for id, tok := range running {
			delete(running, id)
			return id, tok, true
		}
		return "", 0, false
	}
	lease := func(list ...touba.LeaseAsk) error {
		got, err := q.LeasePlanned(ctx, &asks{list: list})
		for _, d := range got {
			running[d.QueueID] = d.LeaseToken
		}
		return err
	}
	ops := []struct {
		name   string
		weight int
		do     func() error
	}{
		{"enqueue", 4, func() error {
			seq++
			d := &touba.Delivery{TriggerRef: refs[rng.IntN(len(refs))], EventID: fmt.Sprint("e", seq), Digest: "d", Body: []byte(`{}`),
				Headers: map[string]string{}}
			if d.TriggerRef == "trigger:k" {
				d.ConcKey, d.ConcMax = fmt.Sprintf(`"k%d"`, rng.IntN(2)), 1+rng.IntN(2)
				d.CancelKeys = []touba.MatchValue{{Key: cancelKey, Value: strconv.Itoa(rng.IntN(3))}}
			}
			_, err := q.Enqueue(ctx, d)
			return err
		}},
		{"lease fresh", 3, func() error {
			return lease(touba.LeaseAsk{TriggerRef: refs[rng.IntN(len(refs))], N: 1 + rng.IntN(3), ByKey: rng.IntN(2) == 0})
		}},
		{"lease held", 1, func() error {
			a := touba.LeaseAsk{Hold: holds[rng.IntN(len(holds))], N: 1 + rng.IntN(3)}
			if rng.IntN(2) == 0 {
				a.TriggerRef = refs[rng.IntN(len(refs))]
			}
			return lease(a)
		}},
		{"hand back", 3, func() error {
			if id, tok, ok := pick(); ok {
				return q.HoldRun(ctx, id, tok, holds[rng.IntN(len(holds))], codes[rng.IntN(len(codes))], "held")
			}
			return nil
		}},
		{"finish", 1, func() error {
			if id, tok, ok := pick(); ok {
				return q.Finish(ctx, id, tok, []string{touba.StatusDone, touba.StatusFailed}[rng.IntN(2)], "", "")
			}
			return nil
		}},
		{"retry", 1, func() error {
			if id, tok, ok := pick(); ok {
				return q.Retry(ctx, id, tok, time.Now().Add(-time.Second), "E", "again")
			}
			return nil
		}},
		{"pause", 1, func() error {
			_, err := q.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: refs[rng.IntN(len(refs))], At: time.Now(), Operator: "t"})
			return err
		}},
		{"resume", 1, func() error { _, err := q.ResumeTrigger(ctx, refs[rng.IntN(len(refs))]); return err }},
		{"cancel", 1, func() error {
			seq++
			_, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:c", EventID: fmt.Sprint("c", seq), Digest: "d", Body: []byte(`{}`),
				Headers: map[string]string{}, Cancels: []touba.MatchValue{{Key: cancelKey, Value: strconv.Itoa(rng.IntN(3))}}})
			return err
		}},
		{"replay", 1, func() error {
			var ids []string
			for _, s := range []string{touba.StatusFailed, touba.StatusCancelled, touba.StatusParked} {
				got, err := q.IDsByStatus(ctx, s, "")
				if err != nil {
					return err
				}
				ids = append(ids, got...)
			}
			_, err := q.Replay(ctx, ids[:min(3, len(ids))], touba.ReplayOptions{IgnoreCancel: rng.IntN(2) == 0})
			return err
		}},
		{"strand", 1, func() error {
			_, err := q.ParkStranded(ctx, touba.ProgramShape{"trigger:a": {}, "trigger:k": {}, "trigger:c": {}}, 1+rng.IntN(3))
			return err
		}},
		{"restart", 0, func() error {
			clear(running)
			if err := q.Close(); err != nil {
				return err
			}
			q = open()
			return nil
		}},
	}
	var deck []int
	for i, op := range ops {
		for range max(1, op.weight) {
			deck = append(deck, i)
		}
	}
	seen := map[string]int64{}
	// 800 steps, and more (up to 3,200) while a kind of hold was seldom
	// reached: a random sequence may hardly try one (2 of 10 seeds did for
	// held_slot), and the kinds' coverage is asserted below.
	covered := func() bool {
		return seen["held"] >= 3 && seen[touba.HeldSlot] >= 3 && seen[touba.HeldCircuit] >= 3
	}
	for step := 0; step < 800 || step < 3200 && !covered(); step++ {
		op := ops[deck[rng.IntN(len(deck))]]
		if op.name == "restart" && rng.IntN(4) != 0 {
			continue
		}
		if err := op.do(); err != nil {
			t.Fatalf("step %d (%s): %v", step, op.name, err)
		}
		wantBy, wantHeld := scanHeld(t, db)
		by, err := q.CountByTrigger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := q.HeldRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !sameCounts(by, wantBy) || !sameCounts(held, wantHeld) {
			t.Fatalf("step %d (%s), seed %d: counts\n  by trigger %v\n  held runs  %v\nwant (GROUP BY)\n  by trigger %v\n  held runs  %v",
				step, op.name, seed, by, held, wantBy, wantHeld)
		}
		for _, m := range by {
			for _, k := range []string{"held", touba.HeldSlot, touba.HeldCircuit} {
				seen[k] = max(seen[k], m[k])
			}
		}
	}
	t.Logf("the most held at once (one trigger): %v", seen)
	for _, k := range []string{"held", touba.HeldSlot, touba.HeldCircuit} {
		if seen[k] < 3 {
			t.Errorf("at most %d entries held by %s at once: the sequence hardly tried that kind", seen[k], k)
		}
	}
}

// TestHeldCountsTriggersKept: the triggers that keep hold_counts are on
// entries once every migration ran (a migration that rebuilds entries
// drops them with the old table, and the counts would go stale).
func TestHeldCountsTriggersKept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	q, err := queue.Open(ctx, path, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'entries'
		AND name IN ('hold_count_insert', 'hold_count_update', 'hold_count_delete')`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d of the 3 hold count triggers on entries (%v)", n, err)
	}
}
