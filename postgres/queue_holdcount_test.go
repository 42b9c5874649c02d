package postgres

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
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
func scanHeld(t *testing.T, st *Store) (byTrigger, byHold map[string]map[string]int64, pending int64) {
	t.Helper()
	ctx := context.Background()
	byTrigger, byHold = map[string]map[string]int64{}, map[string]map[string]int64{}
	rows, err := st.db.pool.Query(ctx, `SELECT trigger_ref, status, COUNT(*), COUNT(*) FILTER (WHERE held AND hold_on IS NULL),
		COUNT(hold_on), COUNT(*) FILTER (WHERE hold_on IS NOT NULL AND error_code = 'CircuitOpen') FROM touba.entries
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
		m := byTrigger[ref]
		if m == nil {
			m = map[string]int64{}
			byTrigger[ref] = m
		}
		m[s] = n
		if s != touba.StatusPending {
			continue
		}
		pending += n
		for k, v := range map[string]int64{"held": key, touba.HeldSlot: holds - circuit, touba.HeldCircuit: circuit} {
			if v > 0 {
				m[k] = v
			}
		}
	}
	rows.Close()
	rows, err = st.db.pool.Query(ctx, `SELECT hold_on, trigger_ref, COUNT(*) FROM touba.entries
		WHERE status = 'pending' AND hold_on IS NOT NULL GROUP BY hold_on, trigger_ref`)
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
	return byTrigger, byHold, pending
}

func sameCounts(a, b map[string]map[string]int64) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int64) bool { return maps.Equal(x, y) })
}

// TestHeldCountsExactAfterAnySequence: random sequences of enqueues
// (keyed, with cancel keys, of a trigger the program later strands),
// leases of fresh and of handed-back entries, hand-backs on a slot or a
// circuit, finishes, retries, pauses and resumes, cancels, replays,
// strands, take-overs, folds and recounts, through two nodes of one
// database: after each step, CountByTrigger, HeldRuns and the pending
// count read from the counts equal a GROUP BY over the entries. The seed
// is logged; TOUBA_HOLD_SEED replays one.
func TestHeldCountsExactAfterAnySequence(t *testing.T) {
	nodes := openNodes(t, 2, time.Minute)
	ctx := context.Background()
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
	running := map[string]int64{} // queue id -> lease token
	seq := 0
	pick := func() (string, int64, bool) {
		for id, tok := range running { // map order: random enough
			delete(running, id)
			return id, tok, true
		}
		return "", 0, false
	}
	lease := func(st *Store, list ...touba.LeaseAsk) {
		got, err := st.Queue.LeasePlanned(ctx, &asks{list: list})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range got {
			running[d.QueueID] = d.LeaseToken
		}
	}
	ops := []struct {
		name string
		do   func(st *Store) error
	}{
		{"enqueue", func(st *Store) error {
			seq++
			d := &touba.Delivery{TriggerRef: refs[rng.IntN(len(refs))], EventID: fmt.Sprint("e", seq), Digest: "d", Body: []byte(`{}`)}
			if d.TriggerRef == "trigger:k" {
				d.ConcKey, d.ConcMax = fmt.Sprintf(`"k%d"`, rng.IntN(2)), 1+rng.IntN(2)
				d.CancelKeys = []touba.MatchValue{{Key: cancelKey, Value: strconv.Itoa(rng.IntN(3))}}
			}
			_, err := st.Queue.Enqueue(ctx, d)
			return err
		}},
		{"lease fresh", func(st *Store) error {
			lease(st, touba.LeaseAsk{TriggerRef: refs[rng.IntN(len(refs))], N: 1 + rng.IntN(3), ByKey: rng.IntN(2) == 0})
			return nil
		}},
		{"lease held", func(st *Store) error {
			a := touba.LeaseAsk{Hold: holds[rng.IntN(len(holds))], N: 1 + rng.IntN(3)}
			if rng.IntN(2) == 0 {
				a.TriggerRef = refs[rng.IntN(len(refs))]
			}
			lease(st, a)
			return nil
		}},
		{"hand back", func(st *Store) error {
			if id, tok, ok := pick(); ok {
				return st.Queue.HoldRun(ctx, id, tok, holds[rng.IntN(len(holds))], codes[rng.IntN(len(codes))], "held")
			}
			return nil
		}},
		{"hand back", func(st *Store) error {
			if id, tok, ok := pick(); ok {
				return st.Queue.HoldRun(ctx, id, tok, holds[rng.IntN(len(holds))], codes[rng.IntN(len(codes))], "held")
			}
			return nil
		}},
		{"finish", func(st *Store) error {
			if id, tok, ok := pick(); ok {
				status := []string{touba.StatusDone, touba.StatusFailed}[rng.IntN(2)]
				return st.Queue.Finish(ctx, id, tok, status, "", "")
			}
			return nil
		}},
		{"retry", func(st *Store) error {
			if id, tok, ok := pick(); ok {
				return st.Queue.Retry(ctx, id, tok, time.Now().Add(-time.Second), "E", "again")
			}
			return nil
		}},
		{"pause", func(st *Store) error {
			_, err := st.Queue.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: refs[rng.IntN(len(refs))], At: time.Now(), Operator: "t"})
			return err
		}},
		{"resume", func(st *Store) error {
			_, err := st.Queue.ResumeTrigger(ctx, refs[rng.IntN(len(refs))])
			return err
		}},
		{"cancel", func(st *Store) error {
			seq++
			_, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:c", EventID: fmt.Sprint("c", seq), Digest: "d", Body: []byte(`{}`),
				Cancels: []touba.MatchValue{{Key: cancelKey, Value: strconv.Itoa(rng.IntN(3))}}})
			return err
		}},
		{"replay", func(st *Store) error {
			var ids []string
			for _, s := range []string{touba.StatusFailed, touba.StatusCancelled, touba.StatusParked} {
				got, err := st.Queue.IDsByStatus(ctx, s, "")
				if err != nil {
					return err
				}
				ids = append(ids, got...)
			}
			if len(ids) > 3 {
				ids = ids[:3]
			}
			_, err := st.Queue.Replay(ctx, ids, touba.ReplayOptions{IgnoreCancel: rng.IntN(2) == 0})
			return err
		}},
		{"strand", func(st *Store) error {
			_, err := st.Queue.ParkStranded(ctx, touba.ProgramShape{"trigger:a": {}, "trigger:k": {}, "trigger:c": {}}, 1+rng.IntN(3))
			return err
		}},
		{"take over", func(st *Store) error {
			_, err := st.Queue.RequeueRunning(ctx)
			clear(running)
			return err
		}},
		{"fold", func(st *Store) error { _, err := st.Queue.foldHolds(ctx); return err }},
		{"recount", func(st *Store) error { return st.Queue.recountHolds(ctx) }},
	}
	// More of the steps that make held entries than of those that end
	// them, so the counts grow to a few dozen of each kind.
	weights := map[string]int{"enqueue": 4, "lease fresh": 3, "hand back": 2}
	var deck []int
	for i, op := range ops {
		for range max(1, weights[op.name]) {
			deck = append(deck, i)
		}
	}
	seen := map[string]int64{} // the most of each kind held at once
	// 800 steps, and more (up to 3,200) while a kind of hold was seldom
	// reached: a random sequence may hardly try one (2 of 10 seeds did for
	// held_slot), and the kinds' coverage is asserted below.
	covered := func() bool {
		return seen["held"] >= 3 && seen[touba.HeldSlot] >= 3 && seen[touba.HeldCircuit] >= 3
	}
	for step := 0; step < 800 || step < 3200 && !covered(); step++ {
		st := nodes[rng.IntN(len(nodes))]
		op := ops[deck[rng.IntN(len(deck))]]
		if op.name == "take over" && rng.IntN(4) != 0 {
			continue // every running entry back: seldom, or few are ever handed back
		}
		if err := op.do(st); err != nil {
			t.Fatalf("step %d (%s): %v", step, op.name, err)
		}
		wantBy, wantHeld, wantPending := scanHeld(t, st)
		reader := nodes[rng.IntN(len(nodes))]
		by, err := reader.Queue.CountByTrigger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := reader.Queue.HeldRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pending, err := reader.Queue.countPending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !sameCounts(by, wantBy) || !sameCounts(held, wantHeld) || pending != wantPending {
			t.Fatalf("step %d (%s), seed %d: counts\n  by trigger %v\n  held runs  %v\n  pending    %d\nwant (GROUP BY)\n  by trigger %v\n  held runs  %v\n  pending    %d",
				step, op.name, seed, by, held, pending, wantBy, wantHeld, wantPending)
		}
		now := map[string]int64{}
		for _, m := range by {
			for _, k := range []string{"held", touba.HeldSlot, touba.HeldCircuit} {
				now[k] += m[k]
			}
		}
		for k, n := range now {
			seen[k] = max(seen[k], n)
		}
	}
	t.Logf("the most held at once: %v", seen)
	for _, k := range []string{"held", touba.HeldSlot, touba.HeldCircuit} {
		if seen[k] < 3 {
			t.Errorf("at most %d entries held by %s at once: the sequence hardly tried that kind", seen[k], k)
		}
	}
}
