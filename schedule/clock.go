package schedule

import (
	"sync"
	"time"
)

// Clock is the time a Scheduler runs on; System in the daemon, a Manual
// clock in tests.
type Clock interface {
	Now() time.Time
	// Timer's channel receives once the clock reaches at; stop releases
	// it early.
	Timer(at time.Time) (c <-chan time.Time, stop func())
}

// System is the real clock.
type System struct{}

// Now is time.Now.
func (System) Now() time.Time { return time.Now() }

// Timer fires at at (at once if it has passed).
func (System) Timer(at time.Time) (<-chan time.Time, func()) {
	t := time.NewTimer(max(time.Until(at), 0))
	return t.C, func() { t.Stop() }
}

// Manual is a clock that moves only when told: Set and Advance fire the
// timers they pass. Safe for concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*manualTimer]bool
}

type manualTimer struct {
	at time.Time
	c  chan time.Time
}

// NewManual returns a clock showing now.
func NewManual(now time.Time) *Manual {
	return &Manual{now: now, timers: map[*manualTimer]bool{}}
}

// Now is the time last set.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Timer fires when the clock is set at or past at.
func (m *Manual) Timer(at time.Time) (<-chan time.Time, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTimer{at: at, c: make(chan time.Time, 1)}
	if !at.After(m.now) {
		t.c <- m.now
		return t.c, func() {}
	}
	m.timers[t] = true
	return t.c, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.timers, t)
	}
}

// Set moves the clock to now and fires every timer due by then.
func (m *Manual) Set(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = now
	for t := range m.timers {
		if !t.at.After(now) {
			t.c <- now
			delete(m.timers, t)
		}
	}
}

// Advance moves the clock forward by d.
func (m *Manual) Advance(d time.Duration) { m.Set(m.Now().Add(d)) }

// Pending is how many timers wait on the clock, so a test moves it only
// once the scheduler waits.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}
