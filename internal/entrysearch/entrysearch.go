// Package entrysearch is the part of an operator's queue search (SPEC §6
// `queue ls --event-id | --body`) both backends share: given the
// candidates a backend's query yields newest first, it applies the filters
// the query did not, counts what it examined and stops at the bounds.
package entrysearch

import (
	touba "github.com/touba/touba-trigger"
)

// Normalize fills in the defaults of s.
func Normalize(s touba.EntrySearch) touba.EntrySearch {
	if s.MaxScan <= 0 {
		s.MaxScan = touba.DefaultSearchMaxScan
	}
	if s.Limit <= 0 {
		s.Limit = touba.DefaultSearchLimit
	}
	return s
}

// Matches reports whether d passes every filter of s (m compiled from s).
func Matches(s touba.EntrySearch, m *BodyMatcher, d *touba.Delivery) bool {
	switch {
	case s.QueueID != "" && d.QueueID != s.QueueID,
		s.EventID != "" && d.EventID != s.EventID,
		s.TriggerRef != "" && d.TriggerRef != s.TriggerRef,
		s.Status != "" && d.Status != s.Status,
		!s.Since.IsZero() && d.ReceivedAt.Before(s.Since):
		return false
	}
	return m.Match(d.Body)
}

// Collect reads candidates from next (newest first; ok false at the end)
// until s.MaxScan were examined, s.Limit matched, or one older than
// s.Since appears (queue ids are UUIDv7: queue order is arrival order).
// More is set when it stopped with candidates of the window left.
func Collect(s touba.EntrySearch, m *BodyMatcher, next func() (*touba.Delivery, bool, error)) (*touba.SearchResult, error) {
	out := &touba.SearchResult{Entries: []*touba.Delivery{}}
	for {
		d, ok, err := next()
		if err != nil {
			return nil, err
		} else if !ok {
			return out, nil
		}
		if !s.Since.IsZero() && d.ReceivedAt.Before(s.Since) {
			return out, nil
		}
		if out.Scanned == s.MaxScan || len(out.Entries) == s.Limit {
			out.More = true
			return out, nil
		}
		out.Scanned++
		if Matches(s, m, d) {
			out.Entries = append(out.Entries, d)
		}
	}
}
