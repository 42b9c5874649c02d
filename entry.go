package touba

import (
	"errors"
	"time"
)

// EnqueueResult is the queue's identity decision for one delivery, taken in
// the same transaction as the enqueue: Created is true for a new entry;
// otherwise QueueID, Digest and Status are those of the entry that already
// holds the identity.
type EnqueueResult struct {
	QueueID string
	Created bool
	Digest  string
	Status  string
	// Matched are the waiting entries whose open wait this delivery
	// matched (now pending), and Cancelled the entries its Cancels ended
	// or asked to cancel; both empty unless Created.
	Matched   []string
	Cancelled []string
	// Gather says what a created entry's Delivery.Gather did
	// (GatherOpened, GatherMerged, GatherStarted; "" when it had none or
	// its key resolved to nothing), and Carrier is the entry carrying its
	// gathering (its own queue id when it opened it).
	Gather  string
	Carrier string
	// GatherWake is when the gathering starts unless a later delivery
	// moves it (GatherOpened, GatherMerged).
	GatherWake time.Time
	// Routes are, for a created entry with Delivery.Routes, the result of
	// each route's delivery, in their order (Created false where an entry
	// already held the route's identity); nil otherwise.
	Routes []EnqueueResult
}

// EntryFilter selects queue entries for listings, oldest first, or newest
// first with Newest.
type EntryFilter struct {
	Status     string
	TriggerRef string
	Held       bool // only pending entries held back behind an earlier one of their key
	// After is a keyset cursor: only entries whose queue_id sorts after it
	// (the last one of the previous page), so a page costs the same at the
	// millionth entry as at the first.
	After string
	// Newest lists newest first; Before is then its keyset cursor (only
	// entries whose queue_id sorts before it).
	Newest bool
	Before string
	Limit  int // default 100
}

// EntryDetail is what a listing leaves out of one entry.
type EntryDetail struct {
	ErrorMessage string
	NotBefore    *time.Time // set while a retry waits
	BodyBytes    int64      // -1 once retention purged the body
	// Routing is what the entry recorded of routes (SPEC §2.4): an
	// accepting entry's routes fed and not, a route entry's source.
	Routing *Routing
}

// ReplayResult says what an operator's replay did to one entry.
type ReplayResult struct {
	QueueID string `json:"queue_id"`
	From    string `json:"from,omitempty"` // the state it left; "" when nothing was done
	// To is the state it went to: pending, or cancelled for a parked entry
	// asked to cancel while its step ran (SPEC §2.3), unless IgnoreCancel.
	To     string `json:"to,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ReplayOptions are how a replay treats what the entry carries.
type ReplayOptions struct {
	// IgnoreCancel drops a cancel requested while a parked entry's step
	// ran: the entry goes on instead of ending cancelled.
	IgnoreCancel bool
	// Repin pins each replayed entry of a trigger named here to that
	// digest (the running program's definition, SPEC §2.3 --repin).
	Repin map[string]string
}

// QueueStats counts the queue writer's work, for metrics and benchmarks.
type QueueStats struct {
	Commits  int64
	Enqueued int64
	Batched  int64 // requests handled in commits, so Batched/Commits is the mean batch
}

// Sentinels of the stores, matched with errors.Is.
var (
	// ErrClosed: the store was closed (the daemon is shutting down).
	ErrClosed = errors.New("store closed")
	// ErrQueueFull: --max-pending entries are pending.
	ErrQueueFull = errors.New("queue at max pending")
)
