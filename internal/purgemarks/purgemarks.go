// Package purgemarks is the hour arithmetic of the retention pass's marks,
// which both stores keep (postgres/queue_purge.go, sqlite/queue/purge.go):
// for each hour, the lowest queue id an entry that ended in that hour can
// have, so that a pass reads only the ids that can hold what became
// purgeable since the last one.
package purgemarks

import "time"

const (
	// FullEvery is how often a pass reads every entry anyway, for what the
	// marks cannot see.
	FullEvery = 24 * time.Hour
	// Kept is how long marks are kept: a --retention longer than this
	// reads every entry at each pass.
	Kept = 400 * 24 * time.Hour
)

// Hour is the key of the hour t falls in.
func Hour(t time.Time) string { return t.UTC().Format("2006-01-02T15") }

// Window is the hours whose marks a pass with cutoff reads after a pass
// with cutoff prev: from lead before the earlier of the two (the mark that
// covers an end may be that much older) to an hour past cutoff (the end's
// clock and the mark's may differ by minutes), but none past now. hours is
// how many marks the window must hold; one missing, the pass reads every
// entry.
func Window(prev, cutoff, now time.Time, lead time.Duration) (from, to string, hours int64) {
	if prev.After(cutoff) {
		prev = cutoff
	}
	f := prev.Add(-lead).Truncate(time.Hour)
	t := cutoff.Add(time.Hour)
	if t.After(now) {
		t = now
	}
	t = t.Truncate(time.Hour)
	return Hour(f), Hour(t), int64(t.Sub(f)/time.Hour) + 1
}
