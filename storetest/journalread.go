package storetest

import (
	"fmt"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// testEffectList: listings filter by scope and state, are bounded by
// Limit, and come oldest first.
func testEffectList(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	for _, id := range []string{"q1:a", "q1:b", "q1:c", "q2:a"} {
		p := prep(id, "call-"+id)
		p.Scope = id[:2]
		if _, err := e.Journal.Prepare(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Second)
	}
	if err := e.Journal.Finish(e.ctx, touba.EffectOutcome{Scope: "q1", EffectID: "q1:b", CallID: "call-q1:b",
		State: touba.EffectNotApplied}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		f    touba.EffectFilter
		want string
	}{
		{touba.EffectFilter{}, "q1:a q1:b q1:c q2:a"},
		{touba.EffectFilter{Scope: "q1"}, "q1:a q1:b q1:c"},
		{touba.EffectFilter{State: touba.EffectPrepared}, "q1:a q1:c q2:a"},
		{touba.EffectFilter{State: touba.EffectNotApplied, Scope: "q1"}, "q1:b"},
		{touba.EffectFilter{Scope: "q1", Limit: 2}, "q1:a q1:b"},
		{touba.EffectFilter{Scope: "nope"}, ""},
	} {
		got, err := e.Journal.List(e.ctx, tt.f)
		if err != nil {
			t.Fatal(err)
		}
		ids := ""
		for i, ef := range got {
			if i > 0 {
				ids += " "
			}
			ids += ef.EffectID
		}
		if ids != tt.want {
			t.Errorf("List(%+v)=%q, want %q (oldest first)", tt.f, ids, tt.want)
		}
	}
}

func testCountByState(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	if got, err := e.Journal.CountByState(e.ctx); err != nil || len(got) != 0 {
		t.Fatalf("counts of an empty journal: %v, %v", got, err)
	}
	for i, st := range []string{touba.EffectApplied, touba.EffectApplied, touba.EffectUnknown, touba.EffectPrepared,
		touba.EffectDispatched, touba.EffectNotApplied} {
		e.bringTo(t, fmt.Sprintf("q:%d", i), st, touba.RetryReconcile)
	}
	got, err := e.Journal.CountByState(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{touba.EffectApplied: 2, touba.EffectUnknown: 1, touba.EffectPrepared: 1,
		touba.EffectDispatched: 1, touba.EffectNotApplied: 1}
	if len(got) != len(want) {
		t.Fatalf("counts=%v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("counts=%v, want %v", got, want)
		}
	}
	if st := e.Journal.JournalStats(); st.Commits < 1 || st.Transitions < 14 || st.Pending != 0 {
		t.Fatalf("stats %+v, want at least 14 transitions committed and none pending", st)
	}
}
