// Package uuidv7 makes RFC 9562 version 7 UUIDs: a millisecond Unix
// timestamp followed by randomness, so ids sort by creation time and stay
// unique across re-created files.
package uuidv7

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

// Generator makes ids that increase strictly within one process, even for
// many ids in one millisecond (RFC 9562 §6.2, method 1: a 12-bit counter in
// rand_a, seeded randomly each millisecond).
type Generator struct {
	mu      sync.Mutex
	lastMS  int64
	counter uint16
	Now     func() time.Time
}

var std Generator

// New returns a new id from the process-wide generator.
func New() string { return std.New() }

// New returns a new id.
func (g *Generator) New() string {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	var b [16]byte
	if _, err := rand.Read(b[6:]); err != nil {
		panic("uuidv7: crypto/rand failed: " + err.Error())
	}
	g.mu.Lock()
	ms := now().UnixMilli()
	if ms > g.lastMS {
		g.lastMS = ms
		g.counter = binary.BigEndian.Uint16(b[6:8]) & 0x07ff // leave room to count up
	} else {
		ms = g.lastMS
		g.counter++
		if g.counter > 0x0fff { // counter exhausted: borrow the next millisecond
			g.lastMS++
			ms = g.lastMS
			g.counter = 0
		}
	}
	c := g.counter
	g.mu.Unlock()

	b[0], b[1], b[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	b[3], b[4], b[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | byte(c>>8)
	b[7] = byte(c)
	b[8] = 0x80 | (b[8] & 0x3f)
	return format(b)
}

// Floor is the smallest id of millisecond ms (every other bit zero): a
// bound at or below every id made in that millisecond or after it.
func Floor(ms int64) string {
	var b [16]byte
	b[0], b[1], b[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	b[3], b[4], b[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	return format(b)
}

func format(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
