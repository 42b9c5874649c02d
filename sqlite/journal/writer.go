package journal

import (
	"context"
	"errors"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// maxBatch bounds one commit, so that one transaction never grows without
// limit under a flood; the next batch starts right after.
const maxBatch = 512

// Crash points inside the writer, for tests that kill the process between
// two durable steps (see Crashpoint).
const (
	CrashBeforeCommit = "journal.before_commit"
	CrashAfterCommit  = "journal.after_commit"
)

// txFunc is one transition: it runs inside the batch's transaction, under
// its own savepoint, and returns an error to undo only itself.
type txFunc func(ctx context.Context, tx *wtx) error

// wtx is the writer's transaction, with the hot statements prepared once.
type wtx = sqlitex.Tx

// Stats counts the writer's work since Open.
type Stats = touba.JournalStats

// Stats returns the writer's counters.
func (j *Journal) Stats() Stats {
	if j.w == nil {
		return Stats{}
	}
	st := j.w.Stats()
	return Stats{Commits: uint64(st.Commits), Transitions: uint64(st.Ops),
		Failed: uint64(st.Failed), LargestBatch: uint64(st.Largest), Pending: st.Pending}
}

// hotQueries are prepared once at start; see sqlitex.Tx.
var hotQueries = []string{qGetEffect, qInsertEvent, qInsertEventPair, qInsertEffect, qInsertEffectDispatched, qPrepareAgain, qDispatch, qFinish}

// startWriter starts the one goroutine that writes the journal. Every
// transition waits for it; it takes all that are waiting, runs them in one
// transaction (one fsync with synchronous=FULL), and only then answers each
// caller.
func (j *Journal) startWriter(ctx context.Context, onCommit func(int, time.Duration)) error {
	w, err := sqlitex.NewWriter(ctx, j.db.Write, hotQueries, commit.Options{
		MaxBatch:     maxBatch,
		BeforeCommit: func() { crashpoint.Hit(CrashBeforeCommit) },
		AfterCommit:  func() { crashpoint.Hit(CrashAfterCommit) },
		OnBatch: func(n int, took time.Duration, err error) {
			if err != nil {
				j.log.Error().Err(err).Msg("journal commit failed")
			} else if onCommit != nil {
				onCommit(n, took)
			}
		},
	})
	if err != nil {
		return err
	}
	j.w = w
	return nil
}

// submit hands fn to the writer and waits until its batch is committed.
func (j *Journal) submit(ctx context.Context, fn txFunc) error {
	if j.w == nil {
		return sqlitex.ErrReadOnly
	}
	err := j.w.Do(ctx, commit.Op[*wtx](fn))
	if errors.Is(err, commit.ErrClosed) {
		return ErrClosed
	}
	return err
}

// submitShared is submit without a savepoint, for a transition whose guard
// is its first statement: see commit.Writer.DoShared for what fn may return.
func (j *Journal) submitShared(ctx context.Context, fn txFunc) error {
	if j.w == nil {
		return sqlitex.ErrReadOnly
	}
	err := j.w.DoShared(ctx, commit.Op[*wtx](fn))
	if errors.Is(err, commit.ErrClosed) {
		return ErrClosed
	}
	return err
}
