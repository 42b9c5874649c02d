package schedule

import "time"

// Ticks in a time zone. A cron expression names wall-clock times; a zone
// maps each instant to one wall time, but not every wall time to one
// instant: daylight saving time skips some (spring forward) and repeats
// others (fall back). The rule here, one sentence for both:
//
//	a matching wall time W ticks once, at the first instant whose wall
//	time is W or later.
//
// So a wall time that exists ticks at its first occurrence (02:30 on the
// autumn day in Europe/Paris ticks at 02:30 CEST, not again at 02:30 CET),
// and one that does not exist ticks at the end of the gap (02:30 on the
// spring day ticks at 03:00 CEST, the first instant after 01:59:59 CET);
// several skipped wall times (0 2 and 30 2) make that one tick. Every
// tick time is distinct and ticks are strictly increasing.

// Next returns the first tick of c in loc strictly after after, or the
// zero time when there is none (never for an expression Parse accepted).
func (c *Cron) Next(after time.Time, loc *time.Location) time.Time {
	m := maxWallUpTo(after, loc)
	w := c.nextWall(m.Truncate(time.Minute).Add(time.Minute))
	if w.IsZero() {
		return w
	}
	return firstInstant(w, loc)
}

// wall is t's wall-clock time in loc, as a naive time in UTC.
func wall(t time.Time, loc *time.Location) time.Time {
	_, off := t.In(loc).Zone()
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// maxWallUpTo is the latest wall time shown at or before after: after's
// own, unless the clock went back shortly before (the repeated hour), when
// it is the wall time just before the clock went back. A wall time W has
// ticked by after exactly when W is at most this.
func maxWallUpTo(after time.Time, loc *time.Location) time.Time {
	m := wall(after, loc)
	start, _ := after.In(loc).ZoneBounds()
	// No zone ever set its clock back by more than a day; look back two.
	for i := 0; i < 8 && !start.IsZero() && after.Sub(start) < 49*time.Hour; i++ {
		prev := start.Add(-time.Nanosecond)
		if w := wall(prev, loc); w.After(m) {
			m = w
		}
		start, _ = prev.In(loc).ZoneBounds()
	}
	return m
}

// firstInstant is the first instant whose wall time in loc is w or later:
// where w occurs, its first occurrence; where a forward jump skips it,
// the instant of the jump.
func firstInstant(w time.Time, loc *time.Location) time.Time {
	// Offsets stay within a day of UTC, so every instant showing w lies
	// within 30 hours of w read as UTC: walk the zone's periods there.
	var best time.Time
	consider := func(t time.Time) {
		if best.IsZero() || t.Before(best) {
			best = t
		}
	}
	p := w.Add(-30 * time.Hour)
	end := w.Add(30 * time.Hour)
	prevOff, havePrev := 0, false
	for i := 0; i < 16; i++ {
		lt := p.In(loc)
		_, off := lt.Zone()
		start, stop := lt.ZoneBounds()
		if havePrev && off > prevOff {
			// A forward jump at start: the wall times in
			// [start+prevOff, start+off] come first at start.
			before := start.Add(time.Duration(prevOff) * time.Second)
			after := start.Add(time.Duration(off) * time.Second)
			if !w.Before(before) && !w.After(after) {
				consider(start)
			}
		}
		t := w.Add(-time.Duration(off) * time.Second)
		if (start.IsZero() || !t.Before(start)) && (stop.IsZero() || t.Before(stop)) {
			consider(t)
		}
		if stop.IsZero() || stop.After(end) {
			break
		}
		p, prevOff, havePrev = stop, off, true
	}
	return best.In(time.UTC)
}
