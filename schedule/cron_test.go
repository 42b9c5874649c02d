package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/schedule"
)

func mustParse(tb testing.TB, expr string) *schedule.Cron {
	tb.Helper()
	c, err := schedule.Parse(expr)
	if err != nil {
		tb.Fatalf("Parse(%q): %v", expr, err)
	}
	return c
}

func mustZone(tb testing.TB, name string) *time.Location {
	tb.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		tb.Fatal(err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"", "want 5 fields"},
		{"* * * *", "want 5 fields"},
		{"* * * * * *", "want 5 fields"},
		{"60 * * * *", "minute: value \"60\""},
		{"* 24 * * *", "hour"},
		{"* * 0 * *", "day of month"},
		{"* * 32 * *", "day of month"},
		{"* * * 13 *", "month"},
		{"* * * * 8", "day of week"},
		{"5-1 * * * *", "runs backwards"},
		{"*/0 * * * *", "step"},
		{"*/61 * * * *", "step"},
		{"1,,2 * * * *", "empty list item"},
		{"a * * * *", "minute"},
		{"* * * foo *", "month"},
		{"* * * * funday", "day of week"},
		{"0 0 31 2 *", "never matches"},
		{"0 0 30,31 2 *", "never matches"},
		{"-1 * * * *", "minute"},
		{"+1 * * * *", "minute"},
		{"1-2-3 * * * *", "minute"},
	} {
		_, err := schedule.Parse(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.expr, err, tc.want)
		}
	}
}

func TestParseMatches(t *testing.T) {
	// 2026-12-01 is a Tuesday.
	for _, tc := range []struct {
		expr string
		at   string // wall time, read as UTC
		want bool
	}{
		{"* * * * *", "2026-12-01T10:17:00Z", true},
		{"0 3 * * *", "2026-12-01T03:00:00Z", true},
		{"0 3 * * *", "2026-12-01T03:01:00Z", false},
		{"*/15 * * * *", "2026-12-01T03:45:00Z", true},
		{"*/15 * * * *", "2026-12-01T03:50:00Z", false},
		{"10-20/5 * * * *", "2026-12-01T03:15:00Z", true},
		{"10-20/5 * * * *", "2026-12-01T03:25:00Z", false},
		{"5/20 * * * *", "2026-12-01T03:45:00Z", true},
		{"1,2,40-42 * * * *", "2026-12-01T03:41:00Z", true},
		{"0 9-17 * * mon-fri", "2026-12-01T12:00:00Z", true},
		{"0 9-17 * * MON-FRI", "2026-12-06T12:00:00Z", false}, // a Sunday
		{"0 0 * * 0", "2026-12-06T00:00:00Z", true},
		{"0 0 * * 7", "2026-12-06T00:00:00Z", true},
		{"0 0 * * 5-7", "2026-12-06T00:00:00Z", true},
		{"0 0 * dec *", "2026-12-06T00:00:00Z", true},
		{"0 0 * jan-nov *", "2026-12-06T00:00:00Z", false},
		// Both days restricted: either matches.
		{"0 0 1 * mon", "2026-12-07T00:00:00Z", true},  // Monday the 7th
		{"0 0 1 * mon", "2026-12-01T00:00:00Z", true},  // Tuesday the 1st
		{"0 0 1 * mon", "2026-12-08T00:00:00Z", false}, // neither
		// A day field starting with * is unrestricted: both must match.
		{"0 0 */2 * mon", "2026-12-07T00:00:00Z", true},
		{"0 0 */2 * mon", "2026-12-14T00:00:00Z", false}, // Monday, even day
		{"0 0 1 * *", "2026-12-07T00:00:00Z", false},
		{"0 0 * * */2", "2026-12-01T00:00:00Z", true},  // Tuesday is 2
		{"0 0 * * */2", "2026-12-07T00:00:00Z", false}, // Monday is 1
		{"0 0 29 2 *", "2028-02-29T00:00:00Z", true},
	} {
		c := mustParse(t, tc.expr)
		if got := c.MatchWall(utc(tc.at)); got != tc.want {
			t.Errorf("%q matches %s = %v, want %v", tc.expr, tc.at, got, tc.want)
		}
	}
}

func TestNext(t *testing.T) {
	paris := mustZone(t, "Europe/Paris")
	for _, tc := range []struct {
		name, expr, zone, after string
		want                    []string // the next ticks, in UTC
	}{
		{"every minute", "* * * * *", "UTC", "2026-12-01T10:17:30Z",
			[]string{"2026-12-01T10:18:00Z", "2026-12-01T10:19:00Z"}},
		{"strictly after a tick", "* * * * *", "UTC", "2026-12-01T10:17:00Z",
			[]string{"2026-12-01T10:18:00Z"}},
		{"daily in Paris, winter", "0 3 * * *", "Europe/Paris", "2026-12-01T10:00:00Z",
			[]string{"2026-12-02T02:00:00Z", "2026-12-03T02:00:00Z"}},
		{"daily in Paris, summer", "0 3 * * *", "Europe/Paris", "2026-07-01T10:00:00Z",
			[]string{"2026-07-02T01:00:00Z"}},
		{"dom or dow", "0 0 1 * mon", "UTC", "2026-12-01T00:00:00Z",
			[]string{"2026-12-07T00:00:00Z", "2026-12-14T00:00:00Z", "2026-12-21T00:00:00Z", "2026-12-28T00:00:00Z",
				"2027-01-01T00:00:00Z", "2027-01-04T00:00:00Z"}},
		{"leap day", "0 0 29 2 *", "UTC", "2026-12-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"month end rolls the year", "59 23 31 12 *", "UTC", "2026-12-31T23:59:00Z", []string{"2027-12-31T23:59:00Z"}},
		// Spring forward, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00Z).
		// 02:30 does not exist: it ticks at the first instant after the gap.
		{"spring: skipped wall time runs after the gap", "30 2 * * *", "Europe/Paris", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"spring: two skipped times are one tick", "0,30 2 * * *", "Europe/Paris", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"}},
		{"spring: gap and 03:00 collide once", "0 2,3 * * *", "Europe/Paris", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"}},
		{"spring: every 30 min across the gap", "*/30 * * * *", "Europe/Paris", "2026-03-29T00:00:00Z",
			[]string{"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"}},
		// Fall back, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00Z).
		// 02:30 happens twice: it ticks once, at the first (CEST).
		{"autumn: repeated wall time runs once", "30 2 * * *", "Europe/Paris", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"autumn: every 30 min skips the repeat", "*/30 * * * *", "Europe/Paris", "2026-10-25T00:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z", "2026-10-25T02:30:00Z"}},
		{"autumn: from inside the repeated hour", "*/30 * * * *", "Europe/Paris", "2026-10-25T01:10:00Z",
			[]string{"2026-10-25T02:00:00Z"}},
		{"autumn: 03:00 after the repeat", "0 3 * * *", "Europe/Paris", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T02:00:00Z"}},
		// Samoa skipped 30 December 2011 entirely: its noon ticks at the
		// jump (31 December 00:00 local), then noon of the 31st.
		{"a skipped day", "0 12 * * *", "Pacific/Apia", "2011-12-29T12:00:00Z",
			[]string{"2011-12-29T22:00:00Z", "2011-12-30T10:00:00Z", "2011-12-30T22:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.expr)
			loc := mustZone(t, tc.zone)
			at := utc(tc.after)
			for i, w := range tc.want {
				got := c.Next(at, loc)
				if !got.Equal(utc(w)) {
					t.Fatalf("tick %d after %s = %s (%s), want %s", i, at.Format(time.RFC3339), got.Format(time.RFC3339),
						got.In(paris).Format(time.RFC3339), w)
				}
				at = got
			}
		})
	}
}
