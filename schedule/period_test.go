package schedule_test

import (
	"testing"
	"time"
)

func TestCronPeriod(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	from := utc("2026-12-01T10:00:30Z")
	for _, tc := range []struct {
		expr string
		loc  *time.Location
		want time.Duration
	}{
		{"* * * * *", time.UTC, time.Minute},
		{"*/10 * * * *", time.UTC, 10 * time.Minute},
		{"0 3 * * *", time.UTC, 24 * time.Hour},
		{"0 3 * * *", paris, 25 * time.Hour},                   // the autumn night
		{"0 9 * * 1-5", time.UTC, 72 * time.Hour},              // Friday to Monday
		{"0 0 1 * *", time.UTC, 31 * 24 * time.Hour},           // the longest month
		{"* 3 * * *", time.UTC, 23*time.Hour + time.Minute},    // 03:59 to 03:00
		{"0 0 29 2 *", time.UTC, (4*365 + 1) * 24 * time.Hour}, // 2028 to 2032
	} {
		if got := mustParse(t, tc.expr).Period(from, tc.loc); got != tc.want {
			t.Errorf("period of %q in %s = %v, want %v", tc.expr, tc.loc, got, tc.want)
		}
	}
}
