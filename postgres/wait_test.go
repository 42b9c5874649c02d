package postgres

import (
	"testing"
	"time"
)

// waitFor is testkit.WaitFor, which this package's tests cannot import
// (testkit imports server, which imports postgres): it polls cond until it
// holds and fails the test, naming what it waited for, after timeout.
func waitFor(tb testing.TB, timeout time.Duration, cond func() bool, what string) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			if cond() {
				return
			}
			tb.Fatalf("waited %v for %s", timeout, what)
		case <-tick.C:
		}
	}
}
