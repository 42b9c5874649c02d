package postgres

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// Deferred statements (issue 28). In an optimistic batch (internal/commit:
// every operation redo-safe) the three transitions every effect makes, its
// prepare-and-dispatch, its outcome and its entry's end, do not each send
// their statement: they leave a row, and the batch runs each kind as one
// statement for all its rows (journal_batch.go) before any other statement and
// before its commit. One statement for many is one round trip and one
// executor start for many, the bulk of what a single-row statement costs.
//
// Equivalence with the statements run one by one, in order:
//   - an entry has at most one deferred row in a batch: a second operation
//     on it flushes the first (deferring), and any other statement flushes
//     them all (Tx.Exec, Query, QueryRow), so rows of one kind may only move
//     past rows of other entries, whose writes they do not read;
//   - each multi-row statement writes for a row exactly what its single-row
//     one would; a row it could not take whole (a fence that failed, an
//     identity already journaled, an entry no longer running) it leaves
//     unwritten, and the operation's own code runs for it, statement by
//     statement, to take the slow path and explain it (done);
//   - an error of a flush fails the optimistic run, which internal/commit
//     runs again isolated, where nothing is deferred (deferOK is false), so
//     only the operation at fault fails.

// CrashFlushSent is the crash point (internal/crashpoint) just after a
// flush's pipeline went out, its statements holding their rows' locks,
// before its answers are read.
const CrashFlushSent = "pg-flush-sent"

// deferred is what a batch left to its flush.
type deferred struct {
	ids   map[string]struct{} // entries with a deferred row
	pd    []pdRow
	fin   []finRow
	ends  []endRow
	jr    *Journal // the journal of the pd and fin rows
	flush bool     // running the flush: statements go straight out
	err   error    // a flush failed: so does the batch
}

// deferCounts counts the deferred rows of a node's writers: rows, and
// those of them the multi-row statement left to their operation's own
// statements (slow).
type deferCounts struct{ rows, slow atomic.Int64 }

// Optimistic lets the operations of tx's run defer their statements.
func (b backend) Optimistic(t *Tx) { t.deferOK = true }

// Flush runs what tx's operations deferred, and its run history.
func (b backend) Flush(ctx context.Context, t *Tx) error { return t.flushWith(ctx, true) }

var _ commit.Deferrer[*Tx] = backend{}

// deferring tells whether an operation on entry queueID may leave its
// statement to the flush, and counts it as deferred if so.
func (t *Tx) deferring(ctx context.Context, queueID string) bool {
	if !t.deferOK || t.d.flush || t.d.err != nil || queueID == "" {
		return false
	}
	if _, dup := t.d.ids[queueID]; dup {
		if t.flush(ctx) != nil {
			return false // the batch fails; the operation's statement says so
		}
	}
	if t.d.ids == nil {
		t.d.ids = make(map[string]struct{})
	}
	t.d.ids[queueID] = struct{}{}
	return true
}

// flushFirst runs the deferred statements before a statement of another
// operation, which may read what they write.
func (t *Tx) flushFirst(ctx context.Context) error {
	if t.d.flush {
		return nil
	}
	return t.flush(ctx)
}

func (t *Tx) flush(ctx context.Context) error { return t.flushWith(ctx, false) }

// flushWith sends the deferred statements in one round trip (a pipeline:
// each still its own statement, run in order in the transaction), then
// settles their rows. runs: the batch's last flush (Flush), which takes
// its run history along rather than leave it one more round trip at
// commit.
func (t *Tx) flushWith(ctx context.Context, runs bool) error {
	if t.d.err != nil {
		return t.d.err
	}
	if len(t.d.ids) == 0 {
		// Nothing deferred: a batch of run history alone is one
		// statement at commit, without a transaction.
		return nil
	}
	runs = runs && len(t.runs) > 0
	pd, fin, ends := t.d.pd, t.d.fin, t.d.ends
	t.d.pd, t.d.fin, t.d.ends, t.d.ids = nil, nil, nil, nil
	t.b.dc.rows.Add(int64(len(pd) + len(fin) + len(ends)))
	t.d.flush = true
	defer func() { t.d.flush = false }()
	// The order of one run's life: an effect's dispatch, its outcome, the
	// entry's end (of other entries, as rows of one entry never share a
	// flush).
	b := &pgx.Batch{}
	var parts []*flushPart
	if len(pd) > 0 {
		parts = append(parts, t.d.jr.queuePrepares(b, pd))
	}
	if len(fin) > 0 {
		parts = append(parts, t.d.jr.queueOutcomes(b, fin))
	}
	if len(ends) > 0 {
		parts = append(parts, queueEnds(b, ends, t.b.now(), t.b.hot))
	}
	if runs {
		parts = append(parts, queueRuns(b, t.runs))
		t.runs = nil
	}
	t.d.err = t.pipeline(ctx, b, parts)
	if undefinedTable(t.d.err) {
		t.b.hot.gone() // a partition named was dropped: read them again
	}
	return t.d.err
}

// pipeline sends b, reads each part's answer, then settles each part.
func (t *Tx) pipeline(ctx context.Context, b *pgx.Batch, parts []*flushPart) error {
	br, err := t.sendBatch(ctx, b)
	if err != nil {
		return err
	}
	crashpoint.Hit(CrashFlushSent)
	for _, p := range parts {
		if err := p.read(br); err != nil {
			br.Close()
			return err
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	for _, p := range parts {
		if err := p.done(ctx); err != nil {
			return err
		}
	}
	return nil
}

// settle files a deferred operation's own error: a Refused one (it wrote
// nothing) is its caller's answer, in slot; any other fails the batch.
func (t *Tx) settle(err error, slot *error) error {
	t.b.dc.slow.Add(1)
	if err != nil && commit.IsRefused(err) {
		*slot = err
		return nil
	}
	return err
}
