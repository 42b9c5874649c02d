package schedule_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/schedule"
)

// fakeQueue takes ticks like intake does: one entry per (ref, time).
type fakeQueue struct {
	mu      sync.Mutex
	entries map[string][]time.Time
	offers  int
}

func (q *fakeQueue) EnqueueTick(_ context.Context, ref string, at time.Time) (string, string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.offers++
	if slices.ContainsFunc(q.entries[ref], at.Equal) {
		return touba.IntakeDuplicate, "q", nil
	}
	q.entries[ref] = append(q.entries[ref], at)
	return touba.IntakeEnqueued, "q", nil
}

func (q *fakeQueue) LatestTickID(_ context.Context, ref string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var last time.Time
	for _, t := range q.entries[ref] {
		if t.After(last) {
			last = t
		}
	}
	if last.IsZero() {
		return "", nil
	}
	return last.UTC().Format(time.RFC3339), nil
}

func (q *fakeQueue) ticks(ref string) []time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]time.Time{}, q.entries[ref]...)
}

// waitFor is testkit.WaitFor with this package's deadline.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, cond, what)
}

func TestSchedulerTicksOnTheClock(t *testing.T) {
	q := &fakeQueue{entries: map[string][]time.Time{}}
	clock := schedule.NewManual(utc("2026-12-01T10:00:30Z"))
	spec := schedule.Spec{Ref: "trigger:a", Cron: mustParse(t, "* * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpLast}
	s := schedule.New([]schedule.Spec{spec}, schedule.Options{Enqueue: q, Ticks: q, Clock: clock, Log: zerolog.Nop()})
	s.Start(context.Background())
	defer s.Close()
	for _, at := range []string{"2026-12-01T10:01:00Z", "2026-12-01T10:02:00Z", "2026-12-01T10:03:00Z"} {
		clock.Set(utc(at))
		waitFor(t, func() bool { return slices.ContainsFunc(q.ticks("trigger:a"), utc(at).Equal) }, "tick "+at)
	}
	if got := len(q.ticks("trigger:a")); got != 3 {
		t.Fatalf("%d ticks, want 3", got)
	}
}

// failingQueue refuses the first fail offers, as a database that is down.
type failingQueue struct {
	*fakeQueue
	mu   sync.Mutex
	fail int
}

func (q *failingQueue) EnqueueTick(ctx context.Context, ref string, at time.Time) (string, string, error) {
	q.mu.Lock()
	if q.fail > 0 {
		q.fail--
		q.mu.Unlock()
		return "", "", touba.Errorf(touba.ETriggerUnavailable, "database down")
	}
	q.mu.Unlock()
	return q.fakeQueue.EnqueueTick(ctx, ref, at)
}

// A tick the queue refused is tried again, not lost, and no later tick
// overtakes it.
func TestSchedulerRetriesARefusedTick(t *testing.T) {
	q := &failingQueue{fakeQueue: &fakeQueue{entries: map[string][]time.Time{}}, fail: 2}
	clock := schedule.NewManual(utc("2026-12-01T10:00:30Z"))
	spec := schedule.Spec{Ref: "trigger:a", Cron: mustParse(t, "* * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpNone}
	s := schedule.New([]schedule.Spec{spec}, schedule.Options{Enqueue: q, Ticks: q, Clock: clock, Log: zerolog.Nop()})
	s.Start(context.Background())
	defer s.Close()
	clock.Set(utc("2026-12-01T10:01:00Z"))
	// Each retry waits 2s on the clock: move it on 2s at a time, each time
	// once the scheduler waits on it, until the refused tick is taken.
	refused := func() bool { q.mu.Lock(); defer q.mu.Unlock(); return q.fail == 0 }
	for step := 0; len(q.ticks("trigger:a")) == 0; step++ {
		if step == 10 {
			t.Fatalf("the tick was not taken after %d retries", step)
		}
		waitFor(t, func() bool { return clock.Pending() > 0 || len(q.ticks("trigger:a")) > 0 }, "the scheduler to wait")
		if len(q.ticks("trigger:a")) > 0 {
			break
		}
		clock.Advance(2 * time.Second)
	}
	if !refused() {
		t.Fatal("the tick was taken before both refusals")
	}
	waitFor(t, func() bool { return len(q.ticks("trigger:a")) == 1 }, "the refused tick")
	if got := q.ticks("trigger:a")[0]; !got.Equal(utc("2026-12-01T10:01:00Z")) {
		t.Fatalf("tick %s, want 10:01:00", got)
	}
}

// The catch-up at start, per catch_up, from the newest tick the queue
// holds: here 09:00, with the daemon starting at 12:30 on an hourly cron.
func TestSchedulerCatchUp(t *testing.T) {
	for _, tc := range []struct {
		catchUp   string
		retention time.Duration
		want      []string
	}{
		{schedule.CatchUpLast, 0, []string{"12:00"}},
		{schedule.CatchUpAll, 0, []string{"10:00", "11:00", "12:00"}},
		{schedule.CatchUpAll, 150 * time.Minute, []string{"11:00", "12:00"}},
		{schedule.CatchUpNone, 0, nil},
	} {
		t.Run(tc.catchUp, func(t *testing.T) {
			q := &fakeQueue{entries: map[string][]time.Time{"trigger:a": {utc("2026-12-01T09:00:00Z")}}}
			clock := schedule.NewManual(utc("2026-12-01T12:30:00Z"))
			spec := schedule.Spec{Ref: "trigger:a", Cron: mustParse(t, "0 * * * *"), Location: time.UTC, CatchUp: tc.catchUp}
			s := schedule.New([]schedule.Spec{spec}, schedule.Options{Enqueue: q, Ticks: q, Clock: clock, Retention: tc.retention, Log: zerolog.Nop()})
			s.Start(context.Background())
			defer s.Close()
			clock.Set(utc("2026-12-01T13:00:00Z"))
			waitFor(t, func() bool { return slices.ContainsFunc(q.ticks("trigger:a"), utc("2026-12-01T13:00:00Z").Equal) }, "the 13:00 tick")
			want := []time.Time{utc("2026-12-01T09:00:00Z")}
			for _, w := range tc.want {
				want = append(want, utc("2026-12-01T"+w+":00Z"))
			}
			want = append(want, utc("2026-12-01T13:00:00Z"))
			if got := q.ticks("trigger:a"); !slices.EqualFunc(got, want, time.Time.Equal) {
				t.Fatalf("ticks %v, want %v", got, want)
			}
		})
	}
}

// A reload that changes a schedule starts it afresh: no tick of the new
// cron before the reload; one that keeps it changes nothing.
func TestSchedulerSetSpecs(t *testing.T) {
	q := &fakeQueue{entries: map[string][]time.Time{}}
	clock := schedule.NewManual(utc("2026-12-01T10:00:00Z"))
	hourly := schedule.Spec{Ref: "trigger:a", Cron: mustParse(t, "0 * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpAll}
	s := schedule.New([]schedule.Spec{hourly}, schedule.Options{Enqueue: q, Ticks: q, Clock: clock, Log: zerolog.Nop()})
	s.Start(context.Background())
	defer s.Close()
	clock.Set(utc("2026-12-01T11:00:00Z"))
	waitFor(t, func() bool { return len(q.ticks("trigger:a")) == 1 }, "the 11:00 tick")
	clock.Set(utc("2026-12-01T11:20:00Z"))
	// Every 15 minutes from now: 11:15 is before the reload, not a tick.
	s.SetSpecs([]schedule.Spec{{Ref: "trigger:a", Cron: mustParse(t, "*/15 * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpAll}})
	settled(t, s, clock)
	clock.Set(utc("2026-12-01T11:30:00Z"))
	waitFor(t, func() bool { return len(q.ticks("trigger:a")) == 2 }, "the 11:30 tick")
	want := []time.Time{utc("2026-12-01T11:00:00Z"), utc("2026-12-01T11:30:00Z")}
	if got := q.ticks("trigger:a"); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("ticks %v, want %v", got, want)
	}
	// Removed: no more ticks.
	s.SetSpecs(nil)
	settled(t, s, clock)
	clock.Set(utc("2026-12-01T11:45:00Z"))
	s.SetSpecs([]schedule.Spec{{Ref: "trigger:b", Cron: mustParse(t, "*/15 * * * *"), Location: time.UTC}})
	settled(t, s, clock)
	clock.Set(utc("2026-12-01T12:00:00Z"))
	waitFor(t, func() bool { return len(q.ticks("trigger:b")) == 1 }, "trigger:b's 12:00 tick")
	if got := len(q.ticks("trigger:a")); got != 2 {
		t.Fatalf("a removed schedule ticked: %d ticks", got)
	}
}

// settled waits until the scheduler took the last SetSpecs and waits on
// the clock again, so the next clock move is seen under the new specs.
func settled(t *testing.T, s *schedule.Scheduler, clock *schedule.Manual) {
	t.Helper()
	waitFor(t, func() bool { return s.Applied() && clock.Pending() > 0 }, "the scheduler to take the new specs")
}

// downQueue refuses every tick while down, as a database that is out.
type downQueue struct {
	*fakeQueue
	mu      sync.Mutex
	down    bool
	refused int
}

func (q *downQueue) EnqueueTick(ctx context.Context, ref string, at time.Time) (string, string, error) {
	q.mu.Lock()
	if q.down {
		q.refused++
		q.mu.Unlock()
		return "", "", touba.Errorf(touba.ETriggerUnavailable, "database down")
	}
	q.mu.Unlock()
	return q.fakeQueue.EnqueueTick(ctx, ref, at)
}

func (q *downQueue) refusals() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.refused
}

// Ticks that came due while the daemon ran and that the queue refused (a
// database outage over several ticks) are each enqueued once it takes
// them again, whatever catch_up says: catch_up is about ticks missed while
// no daemon ran (SPEC §2.3), and a refused tick is tried again, not lost.
func TestSchedulerKeepsEveryRefusedTick(t *testing.T) {
	for _, catchUp := range []string{schedule.CatchUpLast, schedule.CatchUpNone, schedule.CatchUpAll} {
		t.Run(catchUp, func(t *testing.T) {
			q := &downQueue{fakeQueue: &fakeQueue{entries: map[string][]time.Time{}}, down: true}
			clock := schedule.NewManual(utc("2026-12-01T10:00:30Z"))
			spec := schedule.Spec{Ref: "trigger:a", Cron: mustParse(t, "* * * * *"), Location: time.UTC, CatchUp: catchUp}
			s := schedule.New([]schedule.Spec{spec}, schedule.Options{Enqueue: q, Ticks: q, Clock: clock, Log: zerolog.Nop()})
			s.Start(context.Background())
			defer s.Close()
			for _, at := range []string{"2026-12-01T10:01:00Z", "2026-12-01T10:02:00Z", "2026-12-01T10:03:00Z"} {
				n := q.refusals()
				clock.Set(utc(at))
				waitFor(t, func() bool { return q.refusals() > n }, "the queue to refuse the tick of "+at)
			}
			q.mu.Lock()
			q.down = false
			q.mu.Unlock()
			clock.Set(utc("2026-12-01T10:03:02Z")) // the retry
			waitFor(t, func() bool { return len(q.ticks("trigger:a")) >= 1 }, "the ticks after the outage")
			// The next tick comes in a later pass: the one above has ended.
			clock.Set(utc("2026-12-01T10:04:00Z"))
			waitFor(t, func() bool { return slices.ContainsFunc(q.ticks("trigger:a"), utc("2026-12-01T10:04:00Z").Equal) }, "the 10:04 tick")
			want := []time.Time{utc("2026-12-01T10:01:00Z"), utc("2026-12-01T10:02:00Z"), utc("2026-12-01T10:03:00Z"),
				utc("2026-12-01T10:04:00Z")}
			if got := q.ticks("trigger:a"); !slices.EqualFunc(got, want, time.Time.Equal) {
				t.Fatalf("ticks %v, want %v", got, want)
			}
		})
	}
}
