// Package schedule runs the schedule triggers of SPEC §2.3: it parses
// their five-field cron expressions, computes their ticks in their time
// zones, and enqueues each tick through the normal intake path with the
// tick's time (RFC 3339, UTC) as its event id, so that the identity rule
// makes each tick one entry across restarts and nodes.
package schedule

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	// Time zones must not depend on the host's /usr/share/zoneinfo: a
	// container image without it would refuse every timezone.
	_ "time/tzdata"
)

// Cron is a parsed five-field cron expression: minute, hour, day of
// month, month, day of week. Each field is a bit set of the values it
// matches.
type Cron struct {
	expr                      string
	minute, hour, dom, month  uint64
	dow                       uint64 // 0..6, Sunday is 0 (7 is read as 0)
	domRestricted, dowRestric bool   // the field does not start with '*'
}

// String is the expression as written.
func (c *Cron) String() string { return c.expr }

type field struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i; nil: numbers only
}

var fields = [5]field{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{name: "day of week", min: 0, max: 7, names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

// Parse reads a five-field cron expression. Each field is `*`, a value, a
// range `a-b`, any of these with a step `/n`, or a comma-separated list of
// them; months and days of the week also take their three-letter English
// names (jan, mon; any case), and day of week 7 is Sunday like 0. When both
// day of month and day of week are restricted (neither starts with `*`),
// a day matching either matches, as in every cron since Vixie's. An
// expression that can never match (`0 0 31 2 *`) is refused.
func Parse(expr string) (*Cron, error) {
	parts := strings.Fields(expr)
	if len(parts) != 5 {
		return nil, fmt.Errorf("cron %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", expr, len(parts))
	}
	c := &Cron{expr: strings.Join(parts, " ")}
	sets := [5]*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow}
	for i, p := range parts {
		set, err := parseField(p, fields[i])
		if err != nil {
			return nil, fmt.Errorf("cron %q: %s: %w", expr, fields[i].name, err)
		}
		*sets[i] = set
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domRestricted = !strings.HasPrefix(parts[2], "*")
	c.dowRestric = !strings.HasPrefix(parts[4], "*")
	if !c.canMatch() {
		return nil, fmt.Errorf("cron %q: never matches (no month has that day)", expr)
	}
	return c, nil
}

// canMatch: only the day of month alone can rule out every day (31 in
// February, say); a restricted day of week always matches some day.
func (c *Cron) canMatch() bool {
	if c.dowRestric {
		return true
	}
	longest := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if c.month&(1<<m) == 0 {
			continue
		}
		if c.dom&(1<<(longest[m]+1)-1) != 0 {
			return true
		}
	}
	return false
}

func parseField(s string, f field) (uint64, error) {
	var set uint64
	for _, item := range strings.Split(s, ",") {
		bitsOf, err := parseItem(item, f)
		if err != nil {
			return 0, err
		}
		set |= bitsOf
	}
	return set, nil
}

func parseItem(item string, f field) (uint64, error) {
	if item == "" {
		return 0, fmt.Errorf("empty list item")
	}
	rng, stepText, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepText)
		if err != nil || n < 1 || n > f.max {
			return 0, fmt.Errorf("step %q must be a number from 1 to %d", stepText, f.max)
		}
		step = n
	}
	lo, hi := f.min, f.max
	switch {
	case rng == "*":
		if f.name == "day of week" {
			hi = 6 // 7 is Sunday again: */2 must not add it twice
		}
	case strings.Contains(rng, "-"):
		a, b, _ := strings.Cut(rng, "-")
		var err error
		if lo, err = value(a, f); err != nil {
			return 0, err
		}
		if hi, err = value(b, f); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, fmt.Errorf("range %q runs backwards", rng)
		}
	default:
		v, err := value(rng, f)
		if err != nil {
			return 0, err
		}
		lo = v
		if !hasStep {
			hi = v
		} else if f.name == "day of week" {
			hi = 6
		}
	}
	var set uint64
	for v := lo; v <= hi; v += step {
		set |= 1 << v
	}
	return set, nil
}

func value(s string, f field) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < f.min || v > f.max || (len(s) > 1 && s[0] == '+') {
		return 0, fmt.Errorf("value %q must be a number from %d to %d%s", s, f.min, f.max, namesHint(f))
	}
	return v, nil
}

func namesHint(f field) string {
	if f.names == nil {
		return ""
	}
	return " or a name (" + f.names[0] + ", " + f.names[1] + ", ...)"
}

// matchDay applies the day-of-month / day-of-week rule to a date.
func (c *Cron) matchDay(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domRestricted && c.dowRestric {
		return dom || dow
	}
	return dom && dow
}

// MatchWall reports whether the wall-clock time w (its date and clock
// read as they are, whatever its location) matches every field, seconds
// ignored.
func (c *Cron) MatchWall(w time.Time) bool {
	return c.month&(1<<int(w.Month())) != 0 && c.matchDay(w) &&
		c.hour&(1<<w.Hour()) != 0 && c.minute&(1<<w.Minute()) != 0
}

// searchYears bounds the search for the next matching wall time: a
// 29 February on a given weekday is at most 28 years away, and anything
// Parse accepts matches within that.
const searchYears = 30

// nextWall returns the first matching wall time at or after w (a naive
// time in UTC, minute-aligned), or the zero time when there is none
// within searchYears.
func (c *Cron) nextWall(w time.Time) time.Time {
	limit := w.AddDate(searchYears, 0, 0)
	for w.Before(limit) {
		if c.month&(1<<int(w.Month())) == 0 {
			w = time.Date(w.Year(), w.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !c.matchDay(w) {
			w = time.Date(w.Year(), w.Month(), w.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if c.hour&(1<<w.Hour()) == 0 {
			w = nextSet(w, c.hour, w.Hour(), 23, time.Hour, func(t time.Time) time.Time {
				return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, time.UTC)
			})
			continue
		}
		if c.minute&(1<<w.Minute()) == 0 {
			w = nextSet(w, c.minute, w.Minute(), 59, time.Minute, func(t time.Time) time.Time { return t })
			continue
		}
		return w
	}
	return time.Time{}
}

// nextSet moves w forward by whole units to the next value of set above
// cur, or past max (the next day or hour) when there is none.
func nextSet(w time.Time, set uint64, cur, max int, unit time.Duration, trunc func(time.Time) time.Time) time.Time {
	rest := set >> (cur + 1) << (cur + 1)
	n := max + 1 - cur
	if rest != 0 {
		if v := bits.TrailingZeros64(rest); v <= max {
			n = v - cur
		}
	}
	return trunc(w).Add(time.Duration(n) * unit)
}
