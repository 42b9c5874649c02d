package testkit_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// fatalTB records Fatalf instead of failing the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn on a fatalTB in its own goroutine, as the testing package
// runs a test, and returns what it reported.
func run(t *testing.T, fn func(testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	return f.msg
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	msg := run(t, func(tb testing.TB) {
		testkit.WaitFor(tb, 10*time.Second, func() bool { calls++; return calls == 3 }, "three calls")
	})
	if msg != "" || calls != 3 {
		t.Fatalf("calls=%d, report %q; want 3 calls and no failure", calls, msg)
	}
}

func TestWaitForFailsAtTheDeadlineNamingWhat(t *testing.T) {
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		testkit.WaitFor(tb, 50*time.Millisecond, func() bool { return false }, "the impossible")
	})
	if !strings.Contains(msg, "the impossible") || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("report %q after %v; want a failure naming what, at the deadline", msg, time.Since(start))
	}
}
