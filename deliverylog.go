package touba

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// LoggedDelivery is one row of the delivery log (SPEC §6): a request that
// did not create a queue entry (a rejection, a duplicate, a filtered
// delivery), with what an operator needs to look at it and replay it.
type LoggedDelivery struct {
	DeliveryID string            `json:"delivery_id"`
	At         time.Time         `json:"at"`
	TriggerRef string            `json:"trigger_ref"`
	EventID    string            `json:"event_id"`
	Digest     string            `json:"digest"`
	StatusCode int               `json:"status_code"`
	ErrorCode  string            `json:"error_code"` // "" for a 202 duplicate
	QueueID    string            `json:"queue_id"`
	RemoteAddr string            `json:"remote_addr"`
	Headers    map[string]string `json:"headers"`
	Body       []byte            `json:"-"`
	BodyStored bool              `json:"body_stored"`
}

// LogFilter selects delivery-log rows; the newest come first.
type LogFilter struct {
	Rejected   bool // status code 400 and above, and redeliveries of consumed entries (200, TriggerReplayRejected)
	Code       string
	TriggerRef string
	QueueID    string
	Since      time.Time
	// Before is a keyset cursor: only rows logged before the row with this
	// delivery_id (the last one of the previous page); an unknown id
	// matches nothing.
	Before string
	Limit  int // default 100
	// Refused: only requests answered 400 and above, the sender's
	// delivery refused; a redelivery answered 200 is not one.
	Refused bool
}

// OperatorEvent is one entry of the operators' audit trail: who did what to
// which entry or effect, and how it ended.
type OperatorEvent struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`
	Action   string    `json:"action"`
	QueueID  string    `json:"queue_id,omitempty"`
	Target   string    `json:"target"`
	Outcome  string    `json:"outcome"`
	Operator string    `json:"operator"`
	Detail   string    `json:"detail"`
	// Reason is the operator's --reason, "" when none was given.
	Reason string `json:"reason,omitempty"`
}

// Caps on what a sender controls in a log row. A request may carry 64 KiB
// of headers and a 64 KiB path; kept whole, a flood of such rejections
// would cost 128 KiB a row, in memory while buffered and on disk after.
// Trim cuts each field before the row is buffered, and marks every cut.
const (
	MaxRefBytes        = 256  // trigger_ref (from the path when no trigger matched)
	MaxEventIDBytes    = 256  // event_id (a valid one is at most 200 bytes)
	MaxRemoteAddrBytes = 128  // remote_addr
	MaxHeaderBytes     = 8192 // all kept header names and values of one row together
	maxHeaderNameBytes = 128
)

// TruncatedMark ends every field Trim cut short.
const TruncatedMark = "...[truncated]"

// TruncatedHeader is the header Trim adds to a row whose headers it cut or
// dropped. Its name is not an HTTP token, so no sender can send it.
const TruncatedHeader = "(truncated)"

// cut returns s if it fits in max bytes, else its longest prefix (on a
// UTF-8 boundary) that fits with TruncatedMark appended.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len(TruncatedMark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + TruncatedMark
}

// Trim makes the text fields of d valid UTF-8 without NUL (Clean) and
// cuts the fields a sender controls to their caps, in place, before the
// row is buffered: every delivery log applies it. A PostgreSQL text column
// refuses invalid UTF-8 and NUL, and one refused row would fail the whole
// batch insert it is part of.
func (d *LoggedDelivery) Trim() {
	d.DeliveryID = Clean(d.DeliveryID)
	d.Digest = Clean(d.Digest)
	d.ErrorCode = Clean(d.ErrorCode)
	d.QueueID = Clean(d.QueueID)
	d.TriggerRef = cut(Clean(d.TriggerRef), MaxRefBytes)
	d.EventID = cut(Clean(d.EventID), MaxEventIDBytes)
	d.RemoteAddr = cut(Clean(d.RemoteAddr), MaxRemoteAddrBytes)
	d.Headers = trimHeaders(cleanHeaders(d.Headers))
}

// Clean returns s as valid UTF-8 without NUL: each run of invalid bytes
// and each NUL becomes U+FFFD, the replacement character (what
// encoding/json writes for invalid bytes). A valid string without NUL is
// returned as it is, without a copy.
func Clean(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// cleanHeaders returns h with names and values cleaned; h itself when
// nothing needed it. Two names that clean to one keep their values joined
// with ", ", as repeated HTTP headers are.
func cleanHeaders(h map[string]string) map[string]string {
	dirty := false
	for k, v := range h {
		if Clean(k) != k || Clean(v) != v {
			dirty = true
			break
		}
	}
	if !dirty {
		return h
	}
	out := make(map[string]string, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		name, v := Clean(k), Clean(h[k])
		if prev, ok := out[name]; ok {
			v = prev + ", " + v
		}
		out[name] = v
	}
	return out
}

// trimHeaders keeps headers, in name order, while their names and values
// fit in MaxHeaderBytes; a value that does not fit whole is cut, and the
// headers after the budget is spent are dropped. What was cut or dropped
// is said in TruncatedHeader.
func trimHeaders(h map[string]string) map[string]string {
	total := 0
	for k, v := range h {
		total += len(k) + len(v)
	}
	if total <= MaxHeaderBytes {
		return h
	}
	names := slices.Sorted(maps.Keys(h))
	// Room for the note itself, so the row stays within the cap.
	budget := MaxHeaderBytes - len(TruncatedHeader) - 96
	out := make(map[string]string)
	cutN, droppedN := 0, 0
	for _, k := range names {
		v := h[k]
		name := cut(k, maxHeaderNameBytes)
		room := budget - len(name)
		if room < len(TruncatedMark)+16 {
			droppedN++
			continue
		}
		if name != k || len(v) > room {
			cutN++
		}
		v = cut(v, room)
		out[name] = v
		budget -= len(name) + len(v)
	}
	out[TruncatedHeader] = fmt.Sprintf("%d bytes of headers: %d cut, %d dropped", total, cutN, droppedN)
	return out
}
