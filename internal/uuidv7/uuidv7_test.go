package uuidv7_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/uuidv7"
)

var shape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewShapeAndOrder(t *testing.T) {
	fixed := time.UnixMilli(1_700_000_000_000)
	g := &uuidv7.Generator{Now: func() time.Time { return fixed }}
	prev := ""
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ { // more than the 12-bit counter holds in one ms
		id := g.New()
		if !shape.MatchString(id) {
			t.Fatalf("id %q is not a UUIDv7", id)
		}
		if id <= prev {
			t.Fatalf("id %q not after %q", id, prev)
		}
		if seen[id] {
			t.Fatalf("duplicate %q", id)
		}
		seen[id], prev = true, id
	}
}

func TestTimestampPrefix(t *testing.T) {
	g := &uuidv7.Generator{Now: func() time.Time { return time.UnixMilli(0x0123456789ab) }}
	if got, want := g.New()[:13], "01234567-89ab"; got != want {
		t.Fatalf("prefix=%s, want %s", got, want)
	}
}

// Floor is the id of the millisecond with every other bit zero: at or
// below every id New makes in that millisecond.
func TestFloor(t *testing.T) {
	ms := int64(0x0123456789ab)
	if got, want := uuidv7.Floor(ms), "01234567-89ab-0000-0000-000000000000"; got != want {
		t.Fatalf("Floor = %s, want %s", got, want)
	}
	g := &uuidv7.Generator{Now: func() time.Time { return time.UnixMilli(ms) }}
	for range 100 {
		if id := g.New(); id < uuidv7.Floor(ms) || id >= uuidv7.Floor(ms+1) {
			t.Fatalf("id %s of ms %x outside [%s, %s)", id, ms, uuidv7.Floor(ms), uuidv7.Floor(ms+1))
		}
	}
}
