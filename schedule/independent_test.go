package schedule_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/schedule"
)

// Schedules are independent (SPEC §2.3): one schedule's catch-up, at most
// 100 ticks a pass and schedules in turn, never delays another's due tick,
// and a tick due while the daemon runs is never missed.

// lookClock is a Manual clock that counts the scheduler's looks at it:
// the scheduler reads the clock once as each pass begins, so the offers
// made between two looks are one pass's.
type lookClock struct {
	*schedule.Manual
	looks atomic.Int64
}

func (c *lookClock) Now() time.Time {
	c.looks.Add(1)
	return c.Manual.Now()
}

// offer is one EnqueueTick call: the tick, the pass it was made in and
// the clock as it was made.
type offer struct {
	ref      string
	at, when time.Time
	pass     int64
}

// slowQueue takes ticks like intake (one entry per trigger and time), each
// offer costing cost of the clock, as a busy database does: ticks come due
// while the scheduler works.
type slowQueue struct {
	clock  *lookClock
	cost   time.Duration
	mu     sync.Mutex
	held   map[string]map[int64]bool // unix seconds
	latest map[string]time.Time
	offers []offer
}

func newSlowQueue(clock *lookClock, cost time.Duration) *slowQueue {
	return &slowQueue{clock: clock, cost: cost, held: map[string]map[int64]bool{}, latest: map[string]time.Time{}}
}

// hold puts a tick in the queue, as a run before this one did.
func (q *slowQueue) hold(ref string, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[ref] == nil {
		q.held[ref] = map[int64]bool{}
	}
	q.held[ref][at.Unix()] = true
	if at.After(q.latest[ref]) {
		q.latest[ref] = at
	}
}

func (q *slowQueue) EnqueueTick(_ context.Context, ref string, at time.Time) (string, string, error) {
	q.mu.Lock()
	q.offers = append(q.offers, offer{ref: ref, at: at, when: q.clock.Manual.Now(), pass: q.clock.looks.Load()})
	dup := q.held[ref][at.Unix()]
	q.mu.Unlock()
	q.clock.Advance(q.cost)
	if dup {
		return touba.IntakeDuplicate, "q", nil
	}
	q.hold(ref, at)
	return touba.IntakeEnqueued, "q", nil
}

func (q *slowQueue) LatestTickID(_ context.Context, ref string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.latest[ref].IsZero() {
		return "", nil
	}
	return q.latest[ref].UTC().Format(time.RFC3339), nil
}

func (q *slowQueue) offered(ref string, at time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, o := range q.offers {
		if o.ref == ref && o.at.Equal(at) {
			return true
		}
	}
	return false
}

func (q *slowQueue) log() []offer {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]offer{}, q.offers...)
}

// everyMinute checks that ref's entries are its ticks from first to last,
// every minute, each offered once: none missed, none twice.
func everyMinute(t *testing.T, q *slowQueue, offers []offer, ref string, first, last time.Time) {
	t.Helper()
	times := map[int64]int{}
	for _, o := range offers {
		if o.ref == ref {
			times[o.at.Unix()]++
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for at := first; !at.After(last); at = at.Add(time.Minute) {
		if !q.held[ref][at.Unix()] {
			t.Fatalf("%s: the tick of %s was never enqueued (missed)", ref, at.Format(time.RFC3339))
		}
		if n := times[at.Unix()]; n > 1 {
			t.Fatalf("%s: the tick of %s was offered %d times, want once", ref, at.Format(time.RFC3339), n)
		}
	}
	if got, want := len(q.held[ref]), int(last.Sub(first)/time.Minute)+1; got != want {
		t.Fatalf("%s: %d entries, want %d (every minute from %s to %s)", ref, got, want, first, last)
	}
}

// idle waits until the scheduler has offered tick of ref and waits on the
// clock: then every tick due by the clock is offered.
func idle(t *testing.T, q *slowQueue, clock *lookClock, ref string, tick time.Time) {
	t.Helper()
	waitFor(t, func() bool { return q.offered(ref, tick) && clock.Pending() > 0 }, "the catch-up of "+ref+" to end")
}

// A week of missed ticks of a per-minute cron (catch_up all) is caught up
// 100 a pass, while the other schedule's ticks, due at start and coming
// due meanwhile (each offer costs a second), are each enqueued in the
// pass after they come due, none missed.
func TestCatchUpNeverDelaysADueTick(t *testing.T) {
	t0 := utc("2026-12-08T10:00:00Z")
	weekAgo := t0.Add(-schedule.DefaultRetention)
	clock := &lookClock{Manual: schedule.NewManual(t0.Add(10 * time.Second))}
	q := newSlowQueue(clock, time.Second)
	q.hold("trigger:a", weekAgo)
	q.hold("trigger:b", t0.Add(-time.Minute))
	specs := []schedule.Spec{
		{Ref: "trigger:a", Cron: mustParse(t, "* * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpAll},
		{Ref: "trigger:b", Cron: mustParse(t, "* * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpNone},
	}
	s := schedule.New(specs, schedule.Options{Enqueue: q, Ticks: q, Clock: clock, Log: zerolog.Nop()})
	s.Start(context.Background())
	defer s.Close()
	idle(t, q, clock, "trigger:a", t0)
	s.Close()
	end, offers := clock.Manual.Now().Truncate(time.Minute), q.log()

	firstPass, backlog, bDue := offers[0].pass, 0, false
	for _, o := range offers {
		switch {
		case o.ref == "trigger:b" && o.at.Equal(t0):
			if o.pass != firstPass || backlog > 0 {
				t.Fatalf("b's tick due at start was offered in pass %d after %d of a's catch-up ticks; want in pass 1, before them",
					o.pass-firstPass+1, backlog)
			}
			bDue = true
		case o.ref == "trigger:a" && !o.at.After(t0):
			backlog++
		}
	}
	if !bDue {
		t.Fatal("b's tick due at start was never offered")
	}
	catchUp := func(o offer) bool { return o.ref == "trigger:a" && !o.at.After(t0) }
	perPass(t, offers, catchUp, 10080/100)
	late(t, offers, catchUp, "trigger:b", t0)
	everyMinute(t, q, offers, "trigger:a", weekAgo, end)
	everyMinute(t, q, offers, "trigger:b", t0.Add(-time.Minute), end)
}

// perPass checks that each pass offered at most 100 catch-up ticks and
// that the catch-up took at least passes passes.
func perPass(t *testing.T, offers []offer, catchUp func(offer) bool, passes int) {
	t.Helper()
	n := map[int64]int{}
	for _, o := range offers {
		if catchUp(o) {
			n[o.pass]++
		}
	}
	for p, c := range n {
		if c > 100 {
			t.Fatalf("pass %d offered %d catch-up ticks, want at most 100", p, c)
		}
	}
	if len(n) < passes {
		t.Fatalf("the catch-up took %d passes, want at least %d", len(n), passes)
	}
}

// late checks that each of ref's ticks due after start was offered in the
// pass after it came due at the latest: behind at most 100 catch-up offers.
func late(t *testing.T, offers []offer, catchUp func(offer) bool, ref string, start time.Time) {
	t.Helper()
	for i, o := range offers {
		if o.ref != ref || !o.at.After(start) {
			continue
		}
		behind := 0
		for _, p := range offers[:i] {
			if catchUp(p) && !p.when.Before(o.at) {
				behind++
			}
		}
		if behind > 100 {
			t.Fatalf("%s's tick of %s waited for %d catch-up ticks, want at most 100", ref, o.at.Format(time.RFC3339), behind)
		}
	}
}

// Two backlogs share the passes in turn: neither waits for the other to
// end, and each tick of both is enqueued once.
func TestCatchUpTakesSchedulesInTurn(t *testing.T) {
	t0 := utc("2026-12-08T10:00:00Z")
	dayAgo := t0.Add(-24 * time.Hour)
	clock := &lookClock{Manual: schedule.NewManual(t0)}
	q := newSlowQueue(clock, 0)
	var specs []schedule.Spec
	for _, ref := range []string{"trigger:a", "trigger:c"} {
		q.hold(ref, dayAgo)
		specs = append(specs, schedule.Spec{Ref: ref, Cron: mustParse(t, "* * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpAll})
	}
	s := schedule.New(specs, schedule.Options{Enqueue: q, Ticks: q, Clock: clock, Log: zerolog.Nop()})
	s.Start(context.Background())
	defer s.Close()
	idle(t, q, clock, "trigger:a", t0)
	idle(t, q, clock, "trigger:c", t0)
	s.Close()
	offers := q.log()

	done := map[string]int{}
	for i, o := range offers {
		if i > 0 && o.pass != offers[i-1].pass {
			if d := done["trigger:a"] - done["trigger:c"]; d > 100 || d < -100 {
				t.Fatalf("after pass %d, a caught up %d ticks and c %d: want within 100 of each other",
					offers[i-1].pass, done["trigger:a"], done["trigger:c"])
			}
		}
		done[o.ref]++
	}
	perPass(t, offers, func(offer) bool { return true }, 2*1440/100)
	everyMinute(t, q, offers, "trigger:a", dayAgo, t0)
	everyMinute(t, q, offers, "trigger:c", dayAgo, t0)
}
