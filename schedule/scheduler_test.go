package schedule_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
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

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
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
