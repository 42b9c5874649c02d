package touba

import (
	"encoding/json"
	"time"
)

// EntrySearch is an operator's search of the queue (SPEC §6 `queue ls
// --event-id | --body`, §6.1): one entry by queue id, the entries of an
// event id (the identity index: instant), or a bounded scan, newest first,
// of the entries received since Since whose body holds Value at Pointer.
// Empty fields match everything.
type EntrySearch struct {
	QueueID    string
	EventID    string
	TriggerRef string
	Status     string
	// Pointer is an RFC 6901 JSON pointer into the stored body; Value the
	// JSON it must equal there. Set both or neither.
	Pointer string
	Value   json.RawMessage
	// Since bounds the scan to entries received at or after it; zero for
	// no bound.
	Since time.Time
	// MaxScan is the most entries a scan examines; default 10,000.
	MaxScan int
	// Limit is the most entries returned; default 100.
	Limit int
}

// SearchResult is what a search found, newest first. Scanned counts the
// entries examined; More says the search stopped (at MaxScan or Limit)
// while entries of the window remained unexamined.
type SearchResult struct {
	Entries []*Delivery
	Scanned int
	More    bool
}

// Defaults of EntrySearch.
const (
	DefaultSearchMaxScan = 10_000
	DefaultSearchLimit   = 100
)

// EntrySelection names the entries a bulk replay touches: every entry in
// Status, optionally only of one trigger, with one error code, received
// since Since.
type EntrySelection struct {
	Status     string
	TriggerRef string
	Code       string
	Since      time.Time
}
