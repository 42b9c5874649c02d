package testkit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

func TestWaitForReportReportsOnlyAFailedWait(t *testing.T) {
	reports := 0
	msg := run(t, func(tb testing.TB) {
		testkit.WaitForReport(tb, 10*time.Second, func() bool { return true }, "the possible", func() { reports++ })
	})
	if msg != "" || reports != 0 {
		t.Fatalf("report %q, %d reports; want no failure and no report", msg, reports)
	}
	msg = run(t, func(tb testing.TB) {
		testkit.WaitForReport(tb, 20*time.Millisecond, func() bool { return false }, "the impossible", func() { reports++ })
	})
	if !strings.Contains(msg, "the impossible") || reports != 1 {
		t.Fatalf("report %q, %d reports; want a failure naming what, and one report", msg, reports)
	}
}

func TestEveryReadsTheConditionAtMostOncePerPeriod(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		testkit.WaitFor(tb, 10*time.Second, testkit.Every(20*time.Millisecond, func() bool { calls++; return calls == 4 }), "four reads")
	})
	if took := time.Since(start); msg != "" || calls != 4 || took < 60*time.Millisecond {
		t.Fatalf("calls=%d in %v, report %q; want 4 reads, 20ms apart, and no failure", calls, took, msg)
	}
}
