package tracing

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestExportErrorsWarnOnceAMinute: a collector that is down fails every
// batch; the log gets one line a minute, which says how many it held back.
func TestExportErrorsWarnOnceAMinute(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	dropped := new(atomic.Uint64)
	h := &errorHandler{log: zerolog.New(&buf), now: func() time.Time { return now }, dropped: dropped}
	for i := 0; i < 30; i++ { // a batch every 2 s for a minute
		dropped.Add(5)
		h.Handle(errors.New("connection refused"))
		now = now.Add(2 * time.Second)
	}
	if got := strings.Count(buf.String(), "trace export failed"); got != 1 {
		t.Fatalf("%d warnings in the first minute, want 1:\n%s", got, buf.String())
	}
	h.Handle(errors.New("connection refused"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"errors_since_last_warning":29`) ||
		!strings.Contains(lines[1], `"spans_dropped_total":150`) {
		t.Fatalf("second warning does not count what the minute held:\n%s", buf.String())
	}
	h.closed.Store(true)
	now = now.Add(time.Hour)
	h.Handle(errors.New("after shutdown"))
	if strings.Contains(buf.String(), "after shutdown") {
		t.Fatal("a warning after Shutdown")
	}
}
