package fair_test

import (
	"math"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/fair"
)

// world is a simulated store: each trigger has a backlog of runnable
// entries, and an ask takes what there is.
type world map[string]int

// lease runs one round of s against w and returns what each trigger got.
// A trigger's runs handed back on a hold are under "held:hold/trigger".
func (w world) lease(s *fair.Scheduler, free int, budgets map[string]int, cands ...fair.Candidate) map[string]int {
	r := s.Plan(free, budgets, cands)
	got := map[string]int{}
	for a, ok := r.Next(); ok; a, ok = r.Next() {
		key := a.TriggerRef
		if a.Hold != "" {
			key = "held:" + a.Hold + "/" + a.TriggerRef
		}
		n := min(a.N, w[key])
		w[key] -= n
		got[key] += n
		r.Took(a, n)
	}
	r.Done()
	return got
}

func TestWeightsShareTheWorkersOfEveryLease(t *testing.T) {
	s := fair.New()
	w := world{"a": 1 << 30, "c": 1 << 30}
	total := map[string]int{}
	for range 100 {
		for k, n := range w.lease(s, 16, nil, fair.Candidate{Ref: "a", Weight: 10, Limit: -1}, fair.Candidate{Ref: "c", Weight: 30, Limit: -1}) {
			total[k] += n
		}
	}
	if total["a"]+total["c"] != 1600 {
		t.Fatalf("leased %v, want all 1600 workers used", total)
	}
	if ratio := float64(total["c"]) / float64(total["a"]); math.Abs(ratio-3) > 0.05 {
		t.Fatalf("c/a = %.2f (%v), want 3", ratio, total)
	}
}

func TestOneFreeWorkerAtATimeStillFollowsTheWeights(t *testing.T) {
	s := fair.New()
	w := world{"a": 1 << 30, "c": 1 << 30}
	total := map[string]int{}
	for range 400 {
		for k, n := range w.lease(s, 1, nil, fair.Candidate{Ref: "a", Weight: 10, Limit: -1}, fair.Candidate{Ref: "c", Weight: 30, Limit: -1}) {
			total[k] += n
		}
	}
	if total["a"] != 100 || total["c"] != 300 {
		t.Fatalf("got %v, want a 100 and c 300", total)
	}
}

func TestAFloodNeverTakesAnotherTriggersShare(t *testing.T) {
	s := fair.New()
	w := world{"flood": 3000, "trickle": 10}
	got := w.lease(s, 256, nil, fair.Candidate{Ref: "flood", Weight: 10, Limit: -1}, fair.Candidate{Ref: "trickle", Weight: 10, Limit: -1})
	if got["trickle"] != 10 || got["flood"] != 246 {
		t.Fatalf("got %v, want the trickle's 10 and the flood the other 246 workers", got)
	}
}

func TestUnusedShareGoesToTheOthers(t *testing.T) {
	s := fair.New()
	w := world{"a": 5, "b": 1000}
	got := w.lease(s, 100, nil, fair.Candidate{Ref: "a", Weight: 100, Limit: -1}, fair.Candidate{Ref: "b", Weight: 1, Limit: -1})
	if got["a"] != 5 || got["b"] != 95 {
		t.Fatalf("got %v, want a's 5 and b the other 95", got)
	}
}

func TestIdlingBanksNoCredit(t *testing.T) {
	s := fair.New()
	w := world{"a": 1 << 30}
	cands := []fair.Candidate{{Ref: "a", Weight: 10, Limit: -1}, {Ref: "b", Weight: 10, Limit: -1}}
	for range 50 {
		w.lease(s, 10, nil, cands...) // b has nothing: a takes everything
	}
	w["b"] = 1 << 30
	got := w.lease(s, 10, nil, cands...)
	if got["a"] != 5 || got["b"] != 5 {
		t.Fatalf("after b idled, got %v; want equal shares, not b's 500 runs of back credit", got)
	}
}

func TestLimitBoundsATriggerAndTheRestGoesElsewhere(t *testing.T) {
	s := fair.New()
	w := world{"slots": 600, "other": 10}
	got := w.lease(s, 256, nil, fair.Candidate{Ref: "slots", Weight: 10, Limit: 5}, fair.Candidate{Ref: "other", Weight: 10, Limit: -1})
	if got["slots"] != 5 || got["other"] != 10 {
		t.Fatalf("got %v, want 5 (its free slots) and 10", got)
	}
	got = w.lease(s, 256, nil, fair.Candidate{Ref: "slots", Weight: 10, Limit: 0}, fair.Candidate{Ref: "other", Weight: 10, Limit: -1})
	if got["slots"] != 0 {
		t.Fatalf("a candidate with limit 0 (open circuit) leased %d", got["slots"])
	}
}

func TestHeldRunsAreTheirTriggersShare(t *testing.T) {
	s := fair.New()
	w := world{"held:tool:x/a": 7, "a": 100, "b": 100}
	a := fair.Candidate{Ref: "a", Weight: 10, Limit: -1, Held: []fair.Held{{Hold: "tool:x", N: 7}}}
	b := fair.Candidate{Ref: "b", Weight: 10, Limit: -1}
	got := w.lease(s, 10, nil, a, b)
	if got["held:tool:x/a"] != 5 || got["a"] != 0 || got["b"] != 5 {
		t.Fatalf("got %v, want a's share (5) from its held runs first, and b 5", got)
	}
	a.Held[0].N = 2
	got = w.lease(s, 10, map[string]int{"tool:x": 1}, a, b)
	if got["held:tool:x/a"] != 1 || got["a"] != 4 || got["b"] != 5 {
		t.Fatalf("got %v, want a's held runs cut to tool:x's budget of 1, the rest of its share fresh, b 5", got)
	}
}

func TestABindingsBudgetGoesByWeight(t *testing.T) {
	s := fair.New()
	w := world{"held:tool:x/c": 1 << 30, "a": 1 << 30, "c": 0}
	total := map[string]int{}
	for range 440 {
		a := fair.Candidate{Ref: "a", Weight: 100, Limit: -1, Gate: "tool:x"}
		c := fair.Candidate{Ref: "c", Weight: 10, Limit: -1, Held: []fair.Held{{Hold: "tool:x", N: 1 << 20}}}
		other := fair.Candidate{Ref: "other", Weight: 10, Limit: -1}
		w["other"] = 1 << 30
		for k, n := range w.lease(s, 16, map[string]int{"tool:x": 1}, a, c, other) {
			total[k] += n
		}
	}
	if total["a"] != 400 || total["held:tool:x/c"] != 40 {
		t.Fatalf("got %v, want tool:x's 440 runs shared 10:1 (a 400, c's held 40)", total)
	}
}

func TestWaitingOnABindingBanksNoCredit(t *testing.T) {
	s := fair.New()
	w := world{"held:tool:x/a": 1 << 30, "b": 1 << 30}
	a := fair.Candidate{Ref: "a", Weight: 10, Limit: -1, Held: []fair.Held{{Hold: "tool:x", N: 1 << 30}}}
	b := fair.Candidate{Ref: "b", Weight: 10, Limit: -1}
	for range 50 {
		w.lease(s, 10, map[string]int{"tool:x": 0}, a, b) // tool:x's circuit is open
	}
	got := w.lease(s, 10, nil, a, b) // closed
	if got["held:tool:x/a"] != 5 || got["b"] != 5 {
		t.Fatalf("after a waited on its binding, got %v; want equal shares, not a's 500 runs of back credit", got)
	}
}

func TestResetReplaysTheSameAsks(t *testing.T) {
	s := fair.New()
	r := s.Plan(8, nil, []fair.Candidate{{Ref: "a", Weight: 10, Limit: -1}, {Ref: "b", Weight: 30, Limit: -1}})
	first := asks(r, map[string]int{"a": 1})
	r.Reset()
	second := asks(r, map[string]int{"a": 1})
	if len(first) != len(second) {
		t.Fatalf("asks %v then %v after Reset", first, second)
	}
	for i := range first {
		if first[i] != second[i] {
			t.Fatalf("asks %v then %v after Reset", first, second)
		}
	}
}

func asks(r *fair.Round, have map[string]int) []touba.LeaseAsk {
	var out []touba.LeaseAsk
	for a, ok := r.Next(); ok; a, ok = r.Next() {
		out = append(out, a)
		n, ok := have[a.TriggerRef]
		if !ok {
			n = a.N
		}
		r.Took(a, min(n, a.N))
	}
	return out
}
