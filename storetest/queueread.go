package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// What operators, metrics and readiness read of the queue, and retention.
func runQueueReads(t *testing.T, f Factory) {
	t.Run("IDsAndCountsByStatus", func(t *testing.T) { testByStatus(t, f) })
	t.Run("OldestPending", func(t *testing.T) { testOldestPending(t, f) })
	t.Run("ListFiltersAndOrder", func(t *testing.T) { testList(t, f) })
	t.Run("Detail", func(t *testing.T) { testDetail(t, f) })
	t.Run("PurgeBodiesOnlyOldDone", func(t *testing.T) { testPurgeBodies(t, f) })
	t.Run("PurgeBodiesMany", func(t *testing.T) { testPurgeMany(t, f) })
	t.Run("PurgeBodiesKeepsMatched", func(t *testing.T) { testPurgeKeepsMatched(t, f) })
	t.Run("PurgeBodiesKeepsOffered", func(t *testing.T) { testPurgeKeepsOffered(t, f) })
	t.Run("PurgeBodiesLeavesNil", func(t *testing.T) { testPurgeLeavesNil(t, f) })
	t.Run("Ping", func(t *testing.T) {
		if err := open(t, f, Options{}).Queue.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func testByStatus(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	if got, err := e.Queue.CountByStatus(e.ctx); err != nil || len(got) != 0 {
		t.Fatalf("counts of an empty queue: %v, %v", got, err)
	}
	a, b, c := e.put(t, "a", "1"), e.put(t, "b", "2"), e.put(t, "c", "3")
	other := delivery("d", "4")
	other.TriggerRef = "trigger:other"
	d := e.enqueue(t, other).QueueID
	p := e.put(t, "p", "5")
	e.lease(t, 4, a, b, c, d)
	e.finish(t, a, touba.StatusFailed)
	e.finish(t, b, touba.StatusParked)
	e.finish(t, c, touba.StatusFailed)
	e.finish(t, d, touba.StatusFailed)
	for _, tt := range []struct {
		status, trigger string
		want            []string
	}{
		{touba.StatusFailed, "", []string{a, c, d}},
		{touba.StatusFailed, "trigger:t", []string{a, c}},
		{touba.StatusFailed, "trigger:other", []string{d}},
		{touba.StatusParked, "", []string{b}},
		{touba.StatusPending, "", []string{p}},
		{touba.StatusDone, "", nil},
	} {
		got, err := e.Queue.IDsByStatus(e.ctx, tt.status, tt.trigger)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Fatalf("IDsByStatus(%s, %q)=%v, %v; want %v", tt.status, tt.trigger, got, err, tt.want)
		}
	}
	counts, err := e.Queue.CountByStatus(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{touba.StatusFailed: 3, touba.StatusParked: 1, touba.StatusPending: 1}
	for _, st := range []string{touba.StatusPending, touba.StatusRunning, touba.StatusDone, touba.StatusFailed, touba.StatusParked} {
		if counts[st] != want[st] {
			t.Fatalf("counts=%v, want %v", counts, want)
		}
	}
}

func testOldestPending(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	if _, ok, err := e.Queue.OldestPending(e.ctx); ok || err != nil {
		t.Fatalf("oldest of an empty queue: %v, %v; want none", ok, err)
	}
	a := e.put(t, "a", "1")
	e.clock.Add(time.Minute)
	e.put(t, "b", "2")
	if at, ok, err := e.Queue.OldestPending(e.ctx); !ok || err != nil || !at.Equal(Epoch) {
		t.Fatalf("oldest=%v, %v, %v; want %v", at, ok, err, Epoch)
	}
	e.lease(t, 1, a)
	if at, ok, err := e.Queue.OldestPending(e.ctx); !ok || err != nil || !at.Equal(Epoch.Add(time.Minute)) {
		t.Fatalf("oldest after leasing a=%v, %v, %v; want %v", at, ok, err, Epoch.Add(time.Minute))
	}
}

// testList: listings filter by status and trigger, are bounded by Limit
// (default 100), and come in queue order, oldest first.
func testList(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	var ids []string
	for i := range 105 {
		ids = append(ids, e.put(t, fmt.Sprintf("e%03d", i), fmt.Sprint(i)))
	}
	other := delivery("x", "x")
	other.TriggerRef = "trigger:other"
	x := e.enqueue(t, other).QueueID
	e.lease(t, 2, ids[0], ids[1])
	e.finish(t, ids[1], touba.StatusDone)
	list := func(f touba.EntryFilter) []string {
		t.Helper()
		got, err := e.Queue.List(e.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(got))
		for i, d := range got {
			out[i] = d.QueueID
		}
		return out
	}
	if got := list(touba.EntryFilter{}); !slices.Equal(got, ids[:100]) {
		t.Fatalf("default listing: %d entries, want the first 100 in queue order", len(got))
	}
	if got := list(touba.EntryFilter{Limit: 3}); !slices.Equal(got, ids[:3]) {
		t.Fatalf("limit 3: %v, want %v", got, ids[:3])
	}
	if got := list(touba.EntryFilter{Status: touba.StatusRunning}); !slices.Equal(got, ids[:1]) {
		t.Fatalf("running: %v", got)
	}
	if got := list(touba.EntryFilter{Status: touba.StatusDone, TriggerRef: "trigger:t"}); !slices.Equal(got, ids[1:2]) {
		t.Fatalf("done of trigger:t: %v", got)
	}
	if got := list(touba.EntryFilter{TriggerRef: "trigger:other"}); !slices.Equal(got, []string{x}) {
		t.Fatalf("trigger:other: %v", got)
	}
	if got := list(touba.EntryFilter{Status: touba.StatusPending, Limit: 1000}); len(got) != 104 || got[0] != ids[2] {
		t.Fatalf("pending: %d entries from %v, want 104 from %s", len(got), got[:1], ids[2])
	}
	if got := list(touba.EntryFilter{TriggerRef: "trigger:none"}); len(got) != 0 {
		t.Fatalf("unknown trigger: %v", got)
	}
}

func testDetail(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a := e.put(t, "a", "12345")
	d, err := e.Queue.Detail(e.ctx, a)
	if err != nil || d == nil || d.BodyBytes != 5 || d.NotBefore != nil || d.ErrorMessage != "" {
		t.Fatalf("detail of a new entry: %+v, %v", d, err)
	}
	if d, err := e.Queue.Detail(e.ctx, "no-such-entry"); d != nil || err != nil {
		t.Fatalf("detail of a missing entry: %+v, %v; want nil, nil", d, err)
	}
	empty := e.put(t, "empty", "")
	if d, err := e.Queue.Detail(e.ctx, empty); err != nil || d.BodyBytes != 0 {
		t.Fatalf("detail of an empty body: %+v, %v; want 0 bytes", d, err)
	}
}

// testPurgeBodies: retention drops the bodies and headers of done entries
// that ended before the cutoff, and nothing else; a purged entry's
// identity still answers redeliveries.
func testPurgeBodies(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	oldDone, failed, parked := e.put(t, "old-done", "1"), e.put(t, "failed", "2"), e.put(t, "parked", "3")
	e.lease(t, 3, oldDone, failed, parked)
	e.finish(t, oldDone, touba.StatusDone)
	e.finish(t, failed, touba.StatusFailed)
	e.finish(t, parked, touba.StatusParked)
	e.clock.Add(48 * time.Hour)
	newDone := e.put(t, "new-done", "4")
	e.lease(t, 1, newDone)
	e.finish(t, newDone, touba.StatusDone)
	running := e.put(t, "running", "6")
	e.lease(t, 1, running)
	pending := e.put(t, "pending", "5")

	cutoff := e.clock.Now().Add(-24 * time.Hour)
	n, err := e.Queue.PurgeBodies(e.ctx, cutoff)
	if err != nil || n != 1 {
		t.Fatalf("purged %d, %v; want 1", n, err)
	}
	if got := e.get(t, oldDone); len(got.Body) != 0 || len(got.Headers) != 0 || got.Digest != digest("1") {
		t.Fatalf("purged entry: body %q headers %v digest %s; want no body, no headers, the digest kept", got.Body, got.Headers, got.Digest)
	}
	if d, err := e.Queue.Detail(e.ctx, oldDone); err != nil || d.BodyBytes != -1 {
		t.Fatalf("detail of a purged entry: %+v, %v; want body bytes -1", d, err)
	}
	for _, id := range []string{failed, parked, newDone, pending, running} {
		if got := e.get(t, id); len(got.Body) == 0 || len(got.Headers) == 0 {
			t.Fatalf("entry %s (%s) lost its body or headers", id, got.Status)
		}
	}
	for _, body := range []string{"1", "9"} {
		r := e.enqueue(t, delivery("old-done", body))
		if r.Created || r.QueueID != oldDone || r.Status != touba.StatusDone || r.Digest != digest("1") {
			t.Fatalf("redelivery after purge: %+v, want the done entry and its digest", r)
		}
	}
	if n, err := e.Queue.PurgeBodies(e.ctx, cutoff); err != nil || n != 0 {
		t.Fatalf("second purge: %d, %v; want 0", n, err)
	}
}

// testPurgeMany purges more bodies than one batch of any sensible size.
func testPurgeMany(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	const n = 1234
	parallel(t, n, func(i int) error {
		_, err := e.Queue.Enqueue(e.ctx, delivery(fmt.Sprint(i), "body"))
		return err
	})
	got, err := e.Queue.Lease(e.ctx, n)
	if err != nil || len(got) != n {
		t.Fatalf("leased %d, %v; want %d", len(got), err, n)
	}
	parallel(t, n, func(i int) error {
		return e.Queue.Finish(e.ctx, got[i].QueueID, e.tok(got[i].QueueID), touba.StatusDone, "", "")
	})
	e.clock.Add(time.Second)
	if purged, err := e.Queue.PurgeBodies(e.ctx, e.clock.Now()); err != nil || purged != n {
		t.Fatalf("purged %d, %v; want %d", purged, err, n)
	}
}

// parallel runs fn(0..n-1) concurrently and fails the test on any error.
func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
