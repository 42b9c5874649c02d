package postgres

import (
	"testing"
	"time"
)

// The pending count is read every second while it is cheap (a small
// backlog) or near the bound, every 10 s in between.
func TestPendingRecountEvery(t *testing.T) {
	for _, c := range []struct {
		seen, max int64
		want      time.Duration
	}{
		{0, 1_000_000, time.Second},
		{9_999, 1_000_000, time.Second},
		{10_000, 1_000_000, 10 * time.Second},
		{499_999, 1_000_000, 10 * time.Second},
		{500_000, 1_000_000, time.Second},
		{2_000_000, 1_000_000, time.Second},
		{20_000, 30_000, time.Second}, // a small bound: past its half
		{5_000, 1_000, time.Second},
	} {
		if got := pendingRecountEvery(c.seen, c.max); got != c.want {
			t.Errorf("pendingRecountEvery(%d, %d) = %v, want %v", c.seen, c.max, got, c.want)
		}
	}
}
