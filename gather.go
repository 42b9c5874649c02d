package touba

import (
	"context"
	"fmt"
	"time"
)

// Gatherings (SPEC §2.1 debounce and batch): many deliveries of one key
// value, one run. The delivery that finds no open gathering of its key
// opens one and carries the run: its entry waits (state waiting) until
// the gathering starts. Each later delivery of the key is matched in the
// transaction that stores it, like a wait_for offer, and ends merged into
// the carrier (merged_into). The gathering starts when its time comes
// (WaitStore.Wake, the wake-up of durable sleeps) or, for a batch, when it
// is full (in the transaction of the delivery that filled it): the
// carrier goes to pending and its run sees every gathered delivery.
//
// A gathering is live while it is open and its carrier waits in it, never
// leased: a carrier cancelled (cancel_on) or parked (a reload stranded
// it) leaves its gathering dead, and the next delivery of the key opens a
// new one. Stores check that condition, so a change that ends a carrier
// need not touch its gathering (nor can one of a release that knows no
// gatherings).

// StatusMerged is a delivery gathered into another entry's run (SPEC
// §3.2): finished, its run is its carrier's.
const StatusMerged = "merged"

// Gathering kinds.
const (
	GatherDebounce = "debounce"
	GatherBatch    = "batch"
)

// Gathering states: open (gathering), started (its carrier went to
// pending), closed (it ended without starting: its carrier was cancelled
// or parked while it gathered, or a newer gathering of its key replaced
// it).
const (
	GatheringOpen    = "open"
	GatheringStarted = "started"
	GatheringClosed  = "closed"
)

// MaxGathered bounds the deliveries of one gathering, whatever its kind: a
// debounce gathering that reaches it starts at once, as a full batch does,
// so one run never holds an unbounded number of bodies.
const MaxGathered = 10_000

// DefaultGatherMaxBytes bounds the bodies of one gathering when its
// trigger's debounce or batch names no max_bytes (issue 43): past it the
// gathering starts at once, as at MaxGathered, so one run never holds more
// than about this much of bodies (plus one body, the one that passed it).
// 64 MiB: a run that reads /events holds the bodies about twice over while
// it sends them (the input, the request), so a daemon with one such run
// per worker stays in a few hundred MiB; at 10 KiB a body it is still
// over 6,000 deliveries a run. MaxGatherMaxBytes bounds what a program may
// set (a run holds the gathering twice over: 1 GiB is 2 GiB of memory).
const (
	DefaultGatherMaxBytes int64 = 64 << 20
	MaxGatherMaxBytes     int64 = 1 << 30
)

// GatherSpec is intake's input to Enqueue for a delivery of a trigger
// with debounce or batch (not read back): the gathering it belongs to and
// the times and size its trigger sets now.
type GatherSpec struct {
	Kind string // GatherDebounce or GatherBatch
	// Key names what gathers, by meaning: the kind and the key's pointer
	// (GatherKeyOf). Value is the compact JSON of the key's value for this
	// delivery ("" for a batch without a key: one gathering per trigger).
	// A gathering takes deliveries of its trigger, Key and Value.
	Key   string
	Value string
	// Window is debounce's window_ms (the run starts that long after the
	// last delivery) or batch's (that long after the first); MaxWait is
	// debounce's max_wait_ms (counted from the first); MaxSize is batch's
	// max_size (the run starts when the gathering holds that many).
	Window  time.Duration
	MaxWait time.Duration
	MaxSize int
	// MaxBytes bounds the bodies the gathering holds: the delivery that
	// brings them to it or past it starts the gathering at once, as a
	// full batch does. 0 is DefaultGatherMaxBytes.
	MaxBytes int64
}

// GatherKeyOf is the key of a gathering of kind whose key is the pointer
// keyRef ("" for a batch without a key).
func GatherKeyOf(kind, keyRef string) string { return kind + keyArgs(keyRef) }

// Check refuses a spec Enqueue cannot apply.
func (g *GatherSpec) Check() error {
	switch {
	case g.Kind != GatherDebounce && g.Kind != GatherBatch:
		return fmt.Errorf("gather: bad kind %q", g.Kind)
	case g.Key == "":
		return fmt.Errorf("gather: the key is required")
	case g.Window <= 0:
		return fmt.Errorf("gather: the window must be positive")
	case g.Kind == GatherDebounce && g.MaxWait < g.Window:
		return fmt.Errorf("gather: max wait %v is below the window %v", g.MaxWait, g.Window)
	case g.Kind == GatherBatch && g.MaxSize < 2:
		return fmt.Errorf("gather: max size %d is below 2", g.MaxSize)
	}
	return nil
}

// Limit is how many deliveries fill a gathering of the spec.
func (g *GatherSpec) Limit() int {
	if g.Kind == GatherBatch && g.MaxSize > 0 {
		return min(g.MaxSize, MaxGathered)
	}
	return MaxGathered
}

// ByteLimit is how many bytes of bodies fill a gathering of the spec.
func (g *GatherSpec) ByteLimit() int64 {
	if g.MaxBytes > 0 {
		return g.MaxBytes
	}
	return DefaultGatherMaxBytes
}

// Opened is when a gathering opened at at starts unless a delivery moves
// it: window after it (a batch's window, debounce's too, bounded by its
// max wait).
func (g *GatherSpec) Opened(at time.Time) (wake, deadline time.Time) {
	if g.Kind == GatherDebounce {
		return at.Add(min(g.Window, g.MaxWait)), at.Add(g.MaxWait)
	}
	return at.Add(g.Window), at.Add(g.Window)
}

// GatherMerge is what one more delivery makes of a gathering.
type GatherMerge struct {
	Size    int       // the gathering's size with it: its place in the run
	Wake    time.Time // when the gathering starts now
	Started bool      // it filled the gathering, which starts at once
	Bytes   int64     // the bodies the gathering holds with it
}

// Merge decides the merge, at at, of a delivery of body bytes into a
// gathering that held size deliveries and held bytes of bodies, whose
// start time and deadline are stored as wake and deadline (TimeFormat):
// debounce waits a window after the last delivery, never past the
// deadline, a batch keeps its time; either starts once it holds Limit
// deliveries or ByteLimit bytes.
func (g *GatherSpec) Merge(at time.Time, size int, held, body int64, wake, deadline string) (GatherMerge, error) {
	w, err := ParseTime(wake)
	if err != nil {
		return GatherMerge{}, fmt.Errorf("gathering's wake_at: %w", err)
	}
	d, err := ParseTime(deadline)
	if err != nil {
		return GatherMerge{}, fmt.Errorf("gathering's deadline: %w", err)
	}
	m := GatherMerge{Size: size + 1, Wake: w, Bytes: held + body}
	if g.Kind == GatherDebounce {
		next := at.Add(g.Window)
		if next.After(d) {
			next = d
		}
		if next.After(w) {
			m.Wake = next
		}
	}
	if m.Size >= g.Limit() || m.Bytes >= g.ByteLimit() {
		m.Started, m.Wake = true, at
	}
	return m, nil
}

// Gather outcomes of an enqueue (EnqueueResult.Gather).
const (
	GatherOpened  = "opened"  // the delivery opened a gathering and carries it
	GatherMerged  = "merged"  // it was merged into an open gathering
	GatherStarted = "started" // it was merged and filled the gathering, which started
)

// Gathering is one gathering, as `queue show` and the console show it.
type Gathering struct {
	Carrier    string `json:"carrier"`
	TriggerRef string `json:"trigger_ref"`
	Kind       string `json:"kind"`
	Key        string `json:"key"`
	Value      string `json:"value"`
	State      string `json:"state"`
	// Live: open and its carrier still waits in it (state open alone may
	// be a gathering whose carrier a cancel ended).
	Live bool `json:"live"`
	// Size is how many deliveries it holds, its carrier included; Bytes
	// the bytes of their bodies, as max_bytes counts them (read from the
	// entries: a body retention purged counts none).
	Size     int       `json:"size"`
	Bytes    int64     `json:"bytes"`
	OpenedAt time.Time `json:"opened_at"`
	LastAt   time.Time `json:"last_at"`
	// WakeAt is when it starts (or started) unless filled first; Deadline
	// is debounce's bound (max_wait_ms after the first delivery).
	WakeAt    time.Time  `json:"wake_at"`
	Deadline  time.Time  `json:"deadline"`
	StartedAt *time.Time `json:"started_at,omitempty"`
}

// SetTimes sets g's times from their stored form (TimeFormat; started
// may be nil).
func (g *Gathering) SetTimes(opened, last, wake, deadline string, started *string) error {
	for _, t := range []struct {
		s   string
		dst *time.Time
	}{{opened, &g.OpenedAt}, {last, &g.LastAt}, {wake, &g.WakeAt}, {deadline, &g.Deadline}} {
		v, err := ParseTime(t.s)
		if err != nil {
			return err
		}
		*t.dst = v
	}
	g.StartedAt = nil
	if started != nil {
		v, err := ParseTime(*started)
		if err != nil {
			return err
		}
		g.StartedAt = &v
	}
	return nil
}

// GatherStore keeps gatherings (SPEC §2.1). The queue store implements
// it; Enqueue applies a Delivery's Gather in the transaction that stores
// it (EnqueueResult.Gather and .Carrier say what it did), the wake loop
// of durable sleeps starts the due gatherings (StartDue) when it wakes the
// due waits, and WaitStore.NextWake counts their times. Replay of a
// merged entry replays its carrier.
type GatherStore interface {
	// StartDue starts the open gatherings whose time is not after now,
	// at most limit of them per call: a live one's carrier goes to
	// pending, a dead one is closed. It returns how many it started.
	StartDue(ctx context.Context, now time.Time, limit int) (int64, error)
	// Gathering is the gathering carrier carries; nil and no error when
	// it carries none.
	Gathering(ctx context.Context, carrier string) (*Gathering, error)
	// Gathered lists the entries merged into carrier, in the order they
	// were merged (the carrier not included). It holds every body at
	// once: a run reads them with GatheredAt and EachGathered instead.
	Gathered(ctx context.Context, carrier string) ([]*Delivery, error)
	// GatheredAt is the entry merged into carrier at place seq (2 is the
	// first merged, the carrier being 1), body included; nil and no
	// error when there is none.
	GatheredAt(ctx context.Context, carrier string, seq int) (*Delivery, error)
	// EachGathered calls fn with each entry merged into carrier, in
	// order, body included, reading them one at a time: a run reading
	// /events holds one body of the store's at a time. A body is valid
	// until fn returns (the store may reuse its memory): fn copies what it
	// keeps. It stops at fn's first error and returns it.
	EachGathered(ctx context.Context, carrier string, fn func(*Delivery) error) error
	// GatherCounts counts the live gatherings and the merged entries.
	GatherCounts(ctx context.Context) (open, merged int64, err error)
}
