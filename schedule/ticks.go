package schedule

import "time"

// ticks are sp's first n ticks in (from, to], oldest first.
func ticks(sp Spec, from, to time.Time, n int) []time.Time {
	var out []time.Time
	for t := sp.Cron.Next(from, sp.Location); len(out) < n && !t.IsZero() && !t.After(to); t = sp.Cron.Next(t, sp.Location) {
		out = append(out, t)
	}
	return out
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// latest is the last tick in (from, to], or zero: searched in windows
// back from to that double until one holds a tick, so it costs about the
// ticks of one window whether the cron ticks every minute or every year.
func latest(c *Cron, loc *time.Location, from, to time.Time) time.Time {
	for win := time.Hour; ; win *= 2 {
		start := to.Add(-win)
		if !start.After(from) {
			start = from
		}
		var last time.Time
		for t := c.Next(start, loc); !t.IsZero() && !t.After(to); t = c.Next(t, loc) {
			last = t
		}
		if !last.IsZero() || start.Equal(from) {
			return last
		}
	}
}
