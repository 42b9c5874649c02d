package storetest

import (
	"fmt"
	"slices"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// Keyset pagination: the console's listings page with a cursor (the last
// row of the previous page), never with an offset.
func runKeyset(t *testing.T, f Factory) {
	t.Run("EntriesAfter", func(t *testing.T) { testEntriesAfter(t, f) })
	t.Run("DeliveriesBefore", func(t *testing.T) { testDeliveriesBefore(t, f) })
}

// testEntriesAfter: paging with After walks every entry of the filter
// once, in queue order, combined with the status and trigger filters.
func testEntriesAfter(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var ids, others []string
	for i := range 7 {
		ids = append(ids, e.put(t, fmt.Sprintf("k%d", i), fmt.Sprint(i)))
		o := delivery(fmt.Sprintf("o%d", i), "o")
		o.TriggerRef = "trigger:other"
		others = append(others, e.enqueue(t, o).QueueID)
	}
	page := func(f touba.EntryFilter) []string {
		t.Helper()
		var out []string
		for range 100 { // bounded: a cursor that is ignored must fail, not loop
			got, err := e.Queue.List(e.ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				return out
			}
			for _, d := range got {
				out = append(out, d.QueueID)
			}
			f.After = got[len(got)-1].QueueID
		}
		t.Fatalf("paging %+v never ended: the cursor is ignored", f)
		return nil
	}
	if got := page(touba.EntryFilter{TriggerRef: "trigger:t", Limit: 3}); !slices.Equal(got, ids) {
		t.Fatalf("pages of trigger:t=%v, want %v", got, ids)
	}
	if got := page(touba.EntryFilter{Status: touba.StatusPending, TriggerRef: "trigger:other", Limit: 2}); !slices.Equal(got, others) {
		t.Fatalf("pages of trigger:other=%v, want %v", got, others)
	}
	all := append(slices.Clone(ids), others...)
	slices.Sort(all)
	if got := page(touba.EntryFilter{Limit: 4}); !slices.Equal(got, all) {
		t.Fatalf("pages of everything=%v, want %v", got, all)
	}
	if got, err := e.Queue.List(e.ctx, touba.EntryFilter{After: ids[5], TriggerRef: "trigger:t"}); err != nil || len(got) != 1 || got[0].QueueID != ids[6] {
		t.Fatalf("after %s: %v, %v; want only %s", ids[5], got, err, ids[6])
	}
}

// testDeliveriesBefore: paging with Before walks the log newest first,
// each row once, with the filters; an unknown cursor matches nothing.
func testDeliveriesBefore(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var want []string
	for i := range 9 {
		d := &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprint(i), StatusCode: 401,
			ErrorCode: touba.ETriggerSignatureInvalid}
		if i%3 == 0 {
			d.TriggerRef, d.StatusCode, d.ErrorCode = "trigger:other", 409, touba.ETriggerEventPayloadConflict
		} else {
			want = append(want, fmt.Sprint(i))
		}
		e.State.Log(d)
	}
	e.flush(t)
	slices.Reverse(want)
	var got []string
	lf := touba.LogFilter{TriggerRef: "trigger:t", Code: touba.ETriggerSignatureInvalid, Limit: 4}
	for range 100 { // bounded: a cursor that is ignored must fail, not loop
		rows := e.deliveries(t, lf)
		if len(rows) == 0 {
			break
		}
		got = append(got, eventIDs(rows)...)
		lf.Before = rows[len(rows)-1].DeliveryID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages=%v, want %v", got, want)
	}
	if rows := e.deliveries(t, touba.LogFilter{Before: "no-such-delivery"}); len(rows) != 0 {
		t.Fatalf("before an unknown id: %v, want nothing", eventIDs(rows))
	}
}
