package schedule

import "time"

// periodTicks bounds the ticks Period walks: a year of an hourly cron,
// a month of one per minute.
const periodTicks = 50000

// Period is the longest gap between two consecutive ticks of c in loc
// from from on, over a year of ticks (at most periodTicks of them, and
// always the gap to the tick after the first): how long a tick may stay
// a schedule's newest one. A day in a zone with daylight saving time has
// a gap of 25 hours once a year; 0 when c has no tick after from.
func (c *Cron) Period(from time.Time, loc *time.Location) time.Duration {
	t := c.Next(from, loc)
	if t.IsZero() {
		return 0
	}
	end := t.AddDate(1, 0, 0)
	var longest time.Duration
	for range periodTicks {
		n := c.Next(t, loc)
		if n.IsZero() {
			break
		}
		longest = max(longest, n.Sub(t))
		if n.After(end) {
			break
		}
		t = n
	}
	return longest
}
