package state

import (
	"fmt"
	"sort"
	"unicode/utf8"
)

// Caps on what a sender controls in a log row. A request may carry 64 KiB
// of headers and a 64 KiB path; kept whole, a flood of such rejections
// would cost 128 KiB a row, in memory while buffered and on disk after.
// Log cuts each field before the row is buffered, and marks every cut.
const (
	MaxRefBytes        = 256  // trigger_ref (from the path when no trigger matched)
	MaxEventIDBytes    = 256  // event_id (a valid one is at most 200 bytes)
	MaxRemoteAddrBytes = 128  // remote_addr
	MaxHeaderBytes     = 8192 // all kept header names and values of one row together
	maxHeaderNameBytes = 128
)

// TruncatedMark ends every field Log cut short.
const TruncatedMark = "...[truncated]"

// TruncatedHeader is the header Log adds to a row whose headers it cut or
// dropped. Its name is not an HTTP token, so no sender can send it.
const TruncatedHeader = "(truncated)"

// rowOverhead approximates what SQLite spends on a row beyond its column
// bytes (record header, the seq and status integers, the three index
// entries). It makes a row's counted size closer to its cost on disk.
const rowOverhead = 160

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

// trim cuts the fields of d a sender controls to their caps, in place.
func trim(d *Delivery) {
	d.TriggerRef = cut(d.TriggerRef, MaxRefBytes)
	d.EventID = cut(d.EventID, MaxEventIDBytes)
	d.RemoteAddr = cut(d.RemoteAddr, MaxRemoteAddrBytes)
	d.Headers = trimHeaders(d.Headers)
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
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
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

// heldBytes approximates the memory a buffered row holds besides its body:
// its strings, its header map (with a per-entry cost) and the struct.
func heldBytes(d *Delivery) int64 {
	n := int64(len(d.DeliveryID)+len(d.TriggerRef)+len(d.EventID)+len(d.Digest)+len(d.ErrorCode)+
		len(d.QueueID)+len(d.RemoteAddr)) + 256
	for k, v := range d.Headers {
		n += int64(len(k)+len(v)) + 64
	}
	return n
}

// storedSize is what a row counts against LogMaxBytes: the bytes of every
// column as written (headers as their JSON text, the body if stored) plus
// rowOverhead. Migration 0004 computes the same for rows written before.
func storedSize(d *Delivery, at string, headersJSON []byte) int64 {
	n := int64(len(d.DeliveryID)+len(at)+len(d.TriggerRef)+len(d.EventID)+len(d.Digest)+len(d.ErrorCode)+
		len(d.QueueID)+len(d.RemoteAddr)+len(headersJSON)) + rowOverhead
	if d.BodyStored {
		n += int64(len(d.Body))
	}
	return n
}

// Trim cuts the fields of d a sender controls to their caps, in place, as
// Log does: for other implementations of the delivery log.
func Trim(d *Delivery) { trim(d) }
