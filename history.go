package touba

import (
	"context"
	"time"
)

// Bounded storage (SPEC §8.1): --history forgets what is finished and older
// than the window, on each backend behind one store operation, driven by
// one loop in package server.

// DefaultHistory is --history's default: 90 days, longer than any major
// sender redelivers (README, "How long senders redeliver").
const DefaultHistory = 90 * 24 * time.Hour

// FinishedStatuses are the entry states --history may forget: nothing can
// run them again on its own. "merged" is a delivery gathered into another
// entry's run (SPEC §2.1); failed and parked entries wait for an operator
// and are never forgotten automatically.
var FinishedStatuses = []string{StatusDone, StatusCancelled, "merged"}

// Finished tells whether status is one of FinishedStatuses.
func Finished(status string) bool {
	for _, s := range FinishedStatuses {
		if s == status {
			return true
		}
	}
	return false
}

// HistoryStore forgets and measures a backend's history. Both backends
// implement it; storetest checks what it keeps.
type HistoryStore interface {
	// Prune runs one bounded pass that forgets the finished entries
	// accepted before before (the window counts from acceptance, as a
	// sender's redelivery window counts from sending), with their identity, runs,
	// checkpoints, journal effects and their events. It never forgets a
	// failed, parked or unfinished entry, one with an effect not settled
	// (prepared, dispatched, unknown), one holding an offer an unfinished
	// entry could still take (SPEC §2.3), or one matched by the wait of an
	// unfinished entry. More in the report says the pass stopped at its
	// bound with work left: the caller runs another one soon.
	Prune(ctx context.Context, before time.Time) (PruneReport, error)
	// Storage measures the backend: sizes, the oldest entry, and what a
	// pass at before would forget now.
	Storage(ctx context.Context, before time.Time) (*StorageReport, error)
}

// PruneReport is what one pass forgot.
type PruneReport struct {
	Entries    int64 `json:"entries"`           // entries forgotten
	Effects    int64 `json:"effects"`           // journal effects forgotten with them
	Partitions int   `json:"partitions"`        // PostgreSQL: partitions dropped
	Kept       int64 `json:"kept"`              // rows past the window kept (failed, parked, unsettled, offers)
	Created    int   `json:"created,omitempty"` // PostgreSQL: partitions created ahead
	More       bool  `json:"more"`              // stopped at its bound with work left
	// Skipped counts the steps not taken because the maintenance lock
	// was held elsewhere (PostgreSQL: another node's pass, or an insert
	// creating its partition); what they would have forgotten stays
	// whole until a later pass.
	Skipped int `json:"skipped,omitempty"`
}

// Add sums two reports.
func (r PruneReport) Add(o PruneReport) PruneReport {
	return PruneReport{Entries: r.Entries + o.Entries, Effects: r.Effects + o.Effects, Partitions: r.Partitions + o.Partitions,
		Kept: r.Kept + o.Kept, Created: r.Created + o.Created, More: o.More, Skipped: r.Skipped + o.Skipped}
}

// StorageSize is the size of one file (SQLite) or table (PostgreSQL, all
// its partitions, indexes and TOAST included).
type StorageSize struct {
	Name  string `json:"name"`           // queue, state, journal; or the table's name
	Kind  string `json:"kind"`           // "file" or "table"
	Path  string `json:"path,omitempty"` // the file's path (SQLite)
	Bytes int64  `json:"bytes"`          // on disk (a file with its WAL)
	// Free is what the file holds but no longer uses (SQLite's free
	// pages), reused by the next writes before the file grows again.
	Free       int64 `json:"free_bytes,omitempty"`
	Partitions int   `json:"partitions,omitempty"` // PostgreSQL: time partitions
}

// StorageReport is what `touba-trigger storage` shows (SPEC §6, §8.1).
type StorageReport struct {
	Backend string        `json:"backend"` // "sqlite" or "postgres"
	Sizes   []StorageSize `json:"sizes"`
	// OldestEntry is when the oldest entry was accepted (any state).
	OldestEntry *time.Time `json:"oldest_entry,omitempty"`
	// OldestFinished is when the oldest finished entry that --history is
	// to forget was accepted (one deliberately kept does not count): on
	// PostgreSQL, the oldest entry in a time partition. Far past the
	// window, pruning is stuck.
	OldestFinished *time.Time `json:"oldest_finished,omitempty"`
	// Forgettable is how many entries a pass would forget now (at least:
	// counting stops at ForgettableCap); Partitions how many partitions it
	// would drop, holding FreedBytes.
	Forgettable    int64 `json:"forgettable"`
	ForgettableCap bool  `json:"forgettable_capped,omitempty"`
	Partitions     int   `json:"partitions,omitempty"`
	FreedBytes     int64 `json:"freed_bytes,omitempty"`
	// Offers are the deliveries kept for a later wait_for that none has
	// taken yet (SPEC §2.3), OldestOffer when the oldest was made: kept
	// while any entry of the awaiting trigger is unfinished, whatever
	// --history and --retention say, so their count is bounded by the
	// matching deliveries that trigger's senders send while one of its
	// entries stays failed or parked (docs/storage.md).
	Offers      int64      `json:"offers"`
	OldestOffer *time.Time `json:"oldest_offer,omitempty"`
	// Note says what is pending (PostgreSQL: tables not yet partitioned,
	// and why).
	Note string `json:"note,omitempty"`
}
