package touba

import (
	"bytes"
	"encoding/json"
	"reflect"
	"time"

	"github.com/touba/touba-trigger/internal/jsonptr"
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

// BodyMatcher tests stored bodies against an EntrySearch's Pointer and
// Value, for the backends' scans.
type BodyMatcher struct {
	ptr  string
	want any
}

// NewBodyMatcher compiles pointer and value; a nil matcher (pointer and
// value both empty) matches every body.
func NewBodyMatcher(pointer string, value json.RawMessage) (*BodyMatcher, error) {
	if pointer == "" && value == nil {
		return nil, nil
	}
	if _, err := jsonptr.Parse(pointer); err != nil {
		return nil, Errorf(EBadRequest, "body pointer %q: %v", pointer, err)
	}
	want, err := decodeJSON(value)
	if err != nil {
		return nil, Errorf(EBadRequest, "body value: %v", err)
	}
	return &BodyMatcher{ptr: pointer, want: want}, nil
}

// Match reports whether body is JSON holding the wanted value at the
// pointer. Numbers compare by their decimal text after normalisation by
// encoding/json (10 and 10.0 differ; 1e1 and 10 differ).
func (m *BodyMatcher) Match(body []byte) bool {
	if m == nil {
		return true
	}
	doc, err := decodeJSON(body)
	if err != nil {
		return false
	}
	cur, err := jsonptr.Get(doc, m.ptr)
	if err != nil {
		return false
	}
	return reflect.DeepEqual(cur, m.want)
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
