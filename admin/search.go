package admin

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
)

// BodySearchWindow is how far back a body search looks when no window is
// given: a body search is a scan, so it is bounded in time as well as in
// entries.
const BodySearchWindow = 24 * time.Hour

// ParseBodyFilter splits "POINTER=VALUE" at its first "=" after the
// pointer: VALUE is taken as JSON when it parses as JSON ("42", "true",
// "\"x\"", "{...}"), else as a string (so "/customer/id=cus_1" needs no
// quotes).
func ParseBodyFilter(s string) (pointer string, value json.RawMessage, err error) {
	ptr, val, ok := strings.Cut(s, "=")
	if !ok {
		return "", nil, badRequest("--body %q: want POINTER=VALUE, such as /customer/id=cus_42", s)
	}
	if ptr != "" && !strings.HasPrefix(ptr, "/") {
		return "", nil, badRequest("--body %q: the JSON pointer must start with \"/\" (such as /customer/id)", s)
	}
	if json.Valid([]byte(val)) {
		return ptr, json.RawMessage(val), nil
	}
	b, _ := json.Marshal(val)
	return ptr, b, nil
}

// LooksLikeQueueID reports whether s has the form of a queue id (a UUID,
// 8-4-4-4-12 hex digits), so one search box can take a queue id or an
// event id.
func LooksLikeQueueID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
				return false
			}
		}
	}
	return true
}

// Search finds queue entries by queue id, event id or body field, newest
// first (SPEC §6, §6.1).
func (s *Service) Search(ctx context.Context, r SearchRequest) (*SearchReport, error) {
	q := touba.EntrySearch{QueueID: r.QueueID, EventID: r.EventID, TriggerRef: TriggerRef(r.TriggerRef), Status: r.Status,
		Since: r.Since, MaxScan: r.MaxScan, Limit: r.Limit}
	if r.Body != "" {
		var err error
		if q.Pointer, q.Value, err = ParseBodyFilter(r.Body); err != nil {
			return nil, err
		}
		if q.Since.IsZero() && q.QueueID == "" && q.EventID == "" {
			q.Since = time.Now().Add(-BodySearchWindow)
		}
	}
	if q.QueueID == "" && q.EventID == "" && r.Body == "" && q.Since.IsZero() {
		return nil, badRequest("search by queue id, event id, body field or time window: give at least one")
	}
	res, err := s.Queue.Search(ctx, q)
	if err != nil {
		return nil, err
	}
	out := &SearchReport{Entries: make([]Entry, 0, len(res.Entries)), Scanned: res.Scanned, More: res.More, Since: q.Since}
	for _, d := range res.Entries {
		purged := int64(0)
		if d.Body == nil && d.Status == touba.StatusDone {
			purged = -1
		}
		out.Entries = append(out.Entries, entryOf(d, purged))
	}
	return out, nil
}
