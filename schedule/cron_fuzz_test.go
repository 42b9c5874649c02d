package schedule_test

import (
	"testing"
	"time"

	"github.com/touba/touba-trigger/schedule"
)

// wallOf is t's wall-clock time in loc read as UTC.
func wallOf(t time.Time, loc *time.Location) time.Time {
	_, off := t.In(loc).Zone()
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// isTick reports whether t may be a tick of c in loc: its wall time
// matches, or t is the instant of a forward jump that skipped a matching
// wall time.
func isTick(c *schedule.Cron, t time.Time, loc *time.Location) bool {
	if c.MatchWall(wallOf(t, loc)) {
		return true
	}
	start, _ := t.In(loc).ZoneBounds()
	if !start.Equal(t) {
		return false
	}
	before, after := wallOf(t.Add(-time.Nanosecond), loc), wallOf(t, loc)
	// The wall minutes the jump skipped: after the one showing just
	// before it, up to the one it landed on.
	for w := before.Truncate(time.Minute).Add(time.Minute); !w.After(after); w = w.Add(time.Minute) {
		if c.MatchWall(w) {
			return true
		}
	}
	return false
}

func FuzzNext(f *testing.F) {
	zones := []string{"UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kolkata", "America/St_Johns"}
	f.Add("0 3 * * *", uint8(1), int64(1774742400))
	f.Add("*/30 * * * *", uint8(1), int64(1792886400))
	f.Add("30 2 * * *", uint8(1), int64(1774699200))
	f.Add("0 0 1 * mon", uint8(0), int64(1796083200))
	f.Add("0 12 * * *", uint8(4), int64(1325160000))
	f.Add("15,45 1-3 * 3,10 sun", uint8(2), int64(1772323200))
	f.Add("0 0 29 2 *", uint8(0), int64(0))
	f.Fuzz(func(t *testing.T, expr string, zone uint8, unix int64) {
		c, err := schedule.Parse(expr)
		if err != nil {
			return
		}
		// Any instant from 1900 to 2200.
		unix = unix % (300 * 365 * 86400)
		if unix < 0 {
			unix = -unix
		}
		at := time.Unix(unix-70*365*86400, 0).UTC()
		loc, err := time.LoadLocation(zones[int(zone)%len(zones)])
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			next := c.Next(at, loc)
			if next.IsZero() {
				t.Fatalf("%q in %s: no tick after %s", expr, loc, at)
			}
			if !next.After(at) {
				t.Fatalf("%q in %s: Next(%s) = %s, not after it", expr, loc, at, next)
			}
			if !isTick(c, next, loc) {
				t.Fatalf("%q in %s: Next(%s) = %s (wall %s) does not match", expr, loc, at, next, wallOf(next, loc))
			}
			at = next
		}
	})
}
