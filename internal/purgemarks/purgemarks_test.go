package purgemarks

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		prev, cutoff, now string
		lead              time.Duration
		from, to          string
		hours             int64
	}{
		// An hourly pass: the hour before the last cutoff's, to the one after this cutoff's.
		{"2026-03-01T09:40:00Z", "2026-03-01T10:40:00Z", "2026-03-08T10:40:00Z", time.Hour, "2026-03-01T08", "2026-03-01T11", 4},
		{"2026-03-01T09:40:00Z", "2026-03-01T10:40:00Z", "2026-03-08T10:40:00Z", 2 * time.Hour, "2026-03-01T07", "2026-03-01T11", 5},
		// A --retention shorter than an hour: no mark past now.
		{"2026-03-01T10:39:58Z", "2026-03-01T10:39:59Z", "2026-03-01T10:40:00Z", time.Hour, "2026-03-01T09", "2026-03-01T10", 2},
		// A longer --retention than the last pass's: from the earlier cutoff.
		{"2026-03-01T12:00:00Z", "2026-03-01T10:40:00Z", "2026-03-08T10:40:00Z", time.Hour, "2026-03-01T09", "2026-03-01T11", 3},
	} {
		from, to, hours := Window(at(c.prev), at(c.cutoff), at(c.now), c.lead)
		if from != c.from || to != c.to || hours != c.hours {
			t.Errorf("Window(%s, %s, %s, %v) = %s, %s, %d; want %s, %s, %d", c.prev, c.cutoff, c.now, c.lead, from, to, hours, c.from, c.to, c.hours)
		}
	}
}
