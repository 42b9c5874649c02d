package testkit

import (
	"testing"
	"time"
)

// WaitForReport is WaitFor that, when the wait fails, then calls report:
// to log what the test saw last (the queue's statuses, a page's body),
// which the failure's what, written before the wait, cannot hold.
func WaitForReport(tb testing.TB, timeout time.Duration, cond func() bool, what string, report func()) {
	tb.Helper()
	held := false
	defer func() {
		if !held {
			report()
		}
	}()
	WaitFor(tb, timeout, cond, what)
	held = true
}

// Every is cond read at most once per d: for a WaitFor condition that costs
// the code under test (a page reloaded, a database session opened), so
// that waiting leaves it its machine. Between reads it reports false; the
// pause runs from the end of the last read, as a sleep after it would.
func Every(d time.Duration, cond func() bool) func() bool {
	var last time.Time
	return func() bool {
		if !last.IsZero() && time.Since(last) < d {
			return false
		}
		defer func() { last = time.Now() }()
		return cond()
	}
}
