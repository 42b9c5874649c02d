package storetest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Search (SPEC §6 `queue ls --event-id | --body`): by queue id, by event
// id across triggers, by a body field within a window, newest first, and
// bounded; and the selection of a bulk replay.
func runSearch(t *testing.T, f Factory) {
	t.Run("Search", func(t *testing.T) { testSearch(t, f) })
	t.Run("NewestFirst", func(t *testing.T) { testNewestFirst(t, f) })
	t.Run("SelectIDs", func(t *testing.T) { testSelectIDs(t, f) })
	t.Run("RecordOperators", func(t *testing.T) { testRecordOperators(t, f) })
}

func testSearch(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	old := e.put(t, "a", `{"customer":{"id":"c1"},"n":1}`) // received at Epoch
	e.clock.Add(time.Hour)
	b := e.put(t, "b", `{"customer":{"id":"c2"},"n":2}`)
	o := delivery("a", `{"customer":{"id":"c1"},"n":"1"}`)
	o.TriggerRef = "trigger:other"
	other := e.enqueue(t, o).QueueID
	bad := e.put(t, "c", `not json`)
	search := func(s touba.EntrySearch) *touba.SearchResult {
		t.Helper()
		res, err := e.Queue.Search(e.ctx, s)
		if err != nil {
			t.Fatalf("search %+v: %v", s, err)
		}
		return res
	}
	ids := func(res *touba.SearchResult) []string {
		var out []string
		for _, d := range res.Entries {
			out = append(out, d.QueueID)
		}
		return out
	}
	for _, c := range []struct {
		name    string
		s       touba.EntrySearch
		want    []string
		scanned int
		more    bool
	}{
		{"queue id", touba.EntrySearch{QueueID: b}, []string{b}, 1, false},
		{"queue id, another status", touba.EntrySearch{QueueID: b, Status: touba.StatusDone}, nil, 1, false},
		{"no such queue id", touba.EntrySearch{QueueID: "0190aaaa-0000-7000-8000-000000000000"}, nil, 0, false},
		{"event id across triggers", touba.EntrySearch{EventID: "a"}, []string{other, old}, 2, false},
		{"event id of one trigger", touba.EntrySearch{EventID: "a", TriggerRef: "trigger:t"}, []string{old}, 1, false},
		{"event id in a window", touba.EntrySearch{EventID: "a", Since: Epoch.Add(30 * time.Minute)}, []string{other}, 1, false},
		{"body string", touba.EntrySearch{Pointer: "/customer/id", Value: json.RawMessage(`"c1"`)}, []string{other, old}, 4, false},
		{"body number is not a string", touba.EntrySearch{Pointer: "/n", Value: json.RawMessage(`1`)}, []string{old}, 4, false},
		{"body string is not a number", touba.EntrySearch{Pointer: "/n", Value: json.RawMessage(`"1"`)}, []string{other}, 4, false},
		{"body object", touba.EntrySearch{Pointer: "/customer", Value: json.RawMessage(`{"id": "c2"}`)}, []string{b}, 4, false},
		{"body in a window", touba.EntrySearch{Pointer: "/customer/id", Value: json.RawMessage(`"c1"`), Since: Epoch.Add(30 * time.Minute)},
			[]string{other}, 3, false},
		{"body with trigger", touba.EntrySearch{Pointer: "/customer/id", Value: json.RawMessage(`"c1"`), TriggerRef: "trigger:t"},
			[]string{old}, 3, false},
		{"bounded scan", touba.EntrySearch{Pointer: "/customer/id", Value: json.RawMessage(`"c1"`), MaxScan: 2}, []string{other}, 2, true},
		{"limit", touba.EntrySearch{Pointer: "/customer/id", Value: json.RawMessage(`"c1"`), Limit: 1}, []string{other}, 2, true},
		{"window only", touba.EntrySearch{Since: Epoch.Add(30 * time.Minute)}, []string{bad, other, b}, 3, false},
	} {
		res := search(c.s)
		if got := ids(res); !slices.Equal(got, c.want) || res.Scanned != c.scanned || res.More != c.more {
			t.Errorf("%s: %v scanned %d more %v; want %v scanned %d more %v", c.name, got, res.Scanned, res.More, c.want, c.scanned, c.more)
		}
	}
	if _, err := e.Queue.Search(e.ctx, touba.EntrySearch{Pointer: "customer", Value: json.RawMessage(`1`)}); touba.ErrorCode(err) != touba.EBadRequest {
		t.Errorf("pointer without /: %v, want %s", err, touba.EBadRequest)
	}
}

// testNewestFirst: a newest-first listing pages with Before and walks
// every entry once.
func testNewestFirst(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var ids []string
	for i := range 7 {
		ids = append(ids, e.put(t, string(rune('a'+i)), "{}"))
	}
	slices.Reverse(ids)
	var got []string
	flt := touba.EntryFilter{Newest: true, Limit: 3}
	for range 10 {
		page, err := e.Queue.List(e.ctx, flt)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, d := range page {
			got = append(got, d.QueueID)
		}
		flt.Before = page[len(page)-1].QueueID
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("newest first: %v, want %v", got, ids)
	}
}

// testSelectIDs: a bulk replay's selection by status, trigger, code and
// receipt time, oldest first.
func testSelectIDs(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var ids []string
	for i := range 5 {
		if i == 2 {
			e.clock.Add(time.Hour)
		}
		d := delivery(string(rune('a'+i)), "{}")
		if i == 4 {
			d.TriggerRef = "trigger:other"
		}
		ids = append(ids, e.enqueue(t, d).QueueID)
	}
	got, err := e.Queue.Lease(e.ctx, 5)
	if err != nil || len(got) != 5 {
		t.Fatalf("lease: %d, %v", len(got), err)
	}
	for i, id := range ids {
		status, code := touba.StatusFailed, "HandlerFailed"
		switch i {
		case 1:
			code = "HandlerTimeout"
		case 3:
			status, code = touba.StatusParked, touba.EEffectOutcomeUnknown
		}
		if err := e.Queue.Finish(e.ctx, id, e.tok(id), status, code, "x"); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		s    touba.EntrySelection
		want []string
	}{
		{"failed", touba.EntrySelection{Status: touba.StatusFailed}, []string{ids[0], ids[1], ids[2], ids[4]}},
		{"failed of trigger:t", touba.EntrySelection{Status: touba.StatusFailed, TriggerRef: "trigger:t"}, []string{ids[0], ids[1], ids[2]}},
		{"failed with a code", touba.EntrySelection{Status: touba.StatusFailed, Code: "HandlerFailed"}, []string{ids[0], ids[2], ids[4]}},
		{"failed since", touba.EntrySelection{Status: touba.StatusFailed, Since: Epoch.Add(time.Minute)}, []string{ids[2], ids[4]}},
		{"parked", touba.EntrySelection{Status: touba.StatusParked}, []string{ids[3]}},
		{"cancelled", touba.EntrySelection{Status: touba.StatusCancelled}, nil},
	} {
		got, err := e.Queue.SelectIDs(e.ctx, c.s)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// testRecordOperators: a batch of audit events lands whole, with reasons.
func testRecordOperators(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var evs []touba.OperatorEvent
	for range 3 {
		evs = append(evs, touba.OperatorEvent{Action: "queue.replay", QueueID: "q1", Target: "q1", Outcome: "done",
			Operator: "uid 0", Detail: "failed -> pending", Reason: "INC-7 fixed"})
	}
	if err := e.State.RecordOperators(e.ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := e.State.RecordOperator(e.ctx, touba.OperatorEvent{Action: "queue.replay", QueueID: "q1", Target: "q1",
		Outcome: "refused", Operator: "uid 0", Detail: "entry is done"}); err != nil {
		t.Fatal(err)
	}
	got, err := e.State.OperatorEvents(e.ctx, "q1", 0)
	if err != nil || len(got) != 4 {
		t.Fatalf("events: %d, %v; want 4", len(got), err)
	}
	if got[0].Reason != "INC-7 fixed" || !got[0].At.Equal(Epoch) || got[3].Reason != "" {
		t.Fatalf("events: %+v", got)
	}
}
