package sqlite

import (
	"context"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// Crash points of a pass, between the commits of its three files.
const (
	CrashAfterForgetEntries = "history.after_entries" // entries gone, runs and effects not yet
	CrashAfterForgetRuns    = "history.after_runs"    // runs gone, effects not yet
	CrashAfterForgetEffects = "history.after_effects" // effects gone, the forgotten list not cleared
)

// History is --history over the three files (SPEC §8.1). The files commit
// apart, so each batch deletes in the one order a crash cannot make
// unsafe: the entries first, with their identity, waits and offers, in
// the queue file, which records them as forgotten in the same commit;
// then their runs and checkpoints (state file); then their effects and
// audit events (journal); then the forgotten record. Once the entry is
// gone nothing can replay or resume it, so its effects, until the pass
// (or the next one, after a crash) deletes them too, are read by no one:
// there is never an effect missing under an entry that could run again.
type History struct {
	Queue   *queue.Queue
	State   *state.State
	Journal *journal.Journal // nil without one
	// Batch bounds one batch (one operation of each file's writer, among
	// intake's); Pass bounds one pass. Zero takes the defaults.
	Batch, Pass int
}

// Default bounds: a batch of 64 entries is a few milliseconds of each
// writer; a pass of 16384 leaves the loop's next pass to go on.
const (
	defaultBatch = 64
	defaultPass  = 16384
)

// History returns the files' --history (nil Journal when none is open).
func (s *Store) History() *History {
	return &History{Queue: s.Queue, State: s.State, Journal: s.Journal}
}

var _ touba.HistoryStore = (*History)(nil)

func (h *History) bounds() (batch, pass int) {
	batch, pass = h.Batch, h.Pass
	if batch <= 0 {
		batch = defaultBatch
	}
	if pass <= 0 {
		pass = defaultPass
	}
	return batch, pass
}

// Prune runs one pass (touba.HistoryStore): first it ends what a crashed
// pass left, then forgets finished entries accepted before before,
// oldest first, batch by batch.
func (h *History) Prune(ctx context.Context, before time.Time) (touba.PruneReport, error) {
	batch, pass := h.bounds()
	var rep touba.PruneReport
	for {
		ids, err := h.Queue.Forgotten(ctx, batch)
		if err != nil || len(ids) == 0 {
			if err != nil {
				return rep, err
			}
			break
		}
		n, err := h.finish(ctx, ids)
		if err != nil {
			return rep, err
		}
		rep.Effects += n
	}
	awaited, err := h.Queue.AwaitedTriggers(ctx)
	if err != nil {
		return rep, err
	}
	var cursor queue.Candidate
	for rep.Entries+rep.Kept < int64(pass) {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		cands, err := h.Queue.ForgetCandidates(ctx, before, cursor, batch)
		if err != nil || len(cands) == 0 {
			return rep, err
		}
		cursor = cands[len(cands)-1]
		ids, err := h.settled(ctx, cands)
		if err != nil {
			return rep, err
		}
		gone, err := h.Queue.Forget(ctx, ids, before, awaited)
		if err != nil {
			return rep, err
		}
		rep.Kept += int64(len(cands) - len(gone))
		crashpoint.Hit(CrashAfterForgetEntries)
		n, err := h.finish(ctx, gone)
		if err != nil {
			return rep, err
		}
		rep.Entries += int64(len(gone))
		rep.Effects += n
		if len(cands) < batch {
			return rep, nil
		}
	}
	rep.More = true
	return rep, nil
}

// settled returns the ids of cands whose effects are all settled.
func (h *History) settled(ctx context.Context, cands []queue.Candidate) ([]string, error) {
	ids := make([]string, 0, len(cands))
	for _, c := range cands {
		ids = append(ids, c.QueueID)
	}
	if h.Journal == nil {
		return ids, nil
	}
	unsettled, err := h.Journal.Unsettled(ctx, ids)
	if err != nil || len(unsettled) == 0 {
		return ids, err
	}
	out := ids[:0]
	for _, id := range ids {
		if !unsettled[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// finish deletes the runs and effects of the forgotten entries ids, then
// their forgotten record, and returns how many effects went.
func (h *History) finish(ctx context.Context, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	if _, err := h.State.ForgetRuns(ctx, ids); err != nil {
		return 0, err
	}
	crashpoint.Hit(CrashAfterForgetRuns)
	var n int64
	if h.Journal != nil {
		var err error
		if n, err = h.Journal.Forget(ctx, ids); err != nil {
			return 0, err
		}
	}
	crashpoint.Hit(CrashAfterForgetEffects)
	return n, h.Queue.ForgetDone(ctx, ids)
}

// forgettableCap bounds Storage's count of what a pass would forget.
const forgettableCap = 1_000_000

// Storage measures the three files (touba.HistoryStore).
func (h *History) Storage(ctx context.Context, before time.Time) (*touba.StorageReport, error) {
	rep := &touba.StorageReport{Backend: "sqlite"}
	type file struct {
		name, path string
		size       func(context.Context) (int64, int64, error)
	}
	files := []file{{"queue", h.Queue.Path(), h.Queue.Size}, {"state", h.State.DB().Path, h.State.DB().Size}}
	if h.Journal != nil {
		files = append(files, file{"journal", h.Journal.Path(), h.Journal.Size})
	}
	for _, f := range files {
		n, free, err := f.size(ctx)
		if err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
		rep.Sizes = append(rep.Sizes, touba.StorageSize{Name: f.name, Kind: "file", Path: f.path, Bytes: n, Free: free})
	}
	finished, entry, okF, okE, err := h.Queue.OldestFinished(ctx)
	if err != nil {
		return nil, err
	}
	if okF {
		rep.OldestFinished = &finished
	}
	if okE {
		rep.OldestEntry = &entry
	}
	n, first, ok, err := h.Queue.Offers(ctx)
	if err != nil {
		return nil, err
	}
	if rep.Offers = n; ok {
		rep.OldestOffer = &first
	}
	if !before.IsZero() {
		if rep.Forgettable, err = h.Queue.CountForgettable(ctx, before, forgettableCap); err != nil {
			return nil, err
		}
		rep.ForgettableCap = rep.Forgettable == forgettableCap
	}
	return rep, nil
}
