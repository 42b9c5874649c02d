package handler

import "testing"

// UseIsolationHelper makes handlers without the network grant start
// through the isolation helper, as they do when the daemon is not root,
// until the test ends. Tests that call it must not run in parallel.
func UseIsolationHelper(tb testing.TB) {
	tb.Helper()
	if !NetworkIsolation() {
		tb.Skip("this host cannot isolate a handler's network")
	}
	old := isolation.how
	isolation.how = isoHelper
	tb.Cleanup(func() { isolation.how = old })
}
