// Package sqlite is the embedded storage of touba-trigger: the queue, the
// state file (run checkpoints, delivery log, audit trail) and the effect
// journal as three SQLite files (SPEC §2), behind the root package's
// storage interfaces. Open is the one way to open them, for the daemon and
// for the operator CLI alike: the journal lock first (it is what keeps a
// second process off the files), then the journal and its recovery, then
// the queue and the state file.
package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// Config says where the files are and how to open them.
type Config struct {
	Queue, State string
	// Journal is the effect journal's file; "" runs without one (and
	// without a lock).
	Journal string
	// TakeOverStaleLock is --take-over-stale-lock.
	TakeOverStaleLock bool
	// ExistingOnly refuses to create the queue and state files: an operator
	// who only meant to look must not create them. A journal file that does
	// not exist is then left unopened.
	ExistingOnly bool
	// RequeueRunning puts entries left running by a crash back to pending
	// (SPEC §3.2): the daemon's start-up.
	RequeueRunning bool
	// ReadOnly opens the existing files for reading only, without the
	// journal lock (SPEC §6: the operator's read-only commands with no
	// daemon running): no migration, no writer, no recovery, nothing
	// written. It implies ExistingOnly. A file whose schema is older than
	// this build is refused with sqlitex.ErrSchemaBehind (a read-write
	// open under the lock migrates it).
	ReadOnly bool

	QueueOptions queue.Options
	StateOptions state.Options
	Secrets      *secret.Set
	// OnJournalCommit sees each journal commit, for metrics.
	OnJournalCommit func(transitions int, took time.Duration)
	Log             zerolog.Logger
}

// Store is the three files, open.
type Store struct {
	Queue   *queue.Queue
	State   *state.State
	Journal *journal.Journal // nil without a journal
	Lock    *journal.Lock    // nil without a journal

	// Recovered are the effects found dispatched at open, now unknown.
	Recovered []touba.Effect
	// Requeued counts the entries found running at open, now pending.
	Requeued int64

	closers []func() error
}

// ErrNoFiles is returned under ExistingOnly when the queue or state file
// is missing.
var ErrNoFiles = errors.New("no such files")

// Open opens the files in the one right order. On error, whatever was
// opened is closed again.
func Open(ctx context.Context, c Config) (_ *Store, err error) {
	if c.ReadOnly {
		c.ExistingOnly, c.RequeueRunning = true, false
		c.QueueOptions.ReadOnly, c.StateOptions.ReadOnly = true, true
	}
	if c.ExistingOnly {
		for _, p := range []string{c.Queue, c.State} {
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrNoFiles, err)
			}
		}
	}
	s := &Store{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if c.Journal != "" && c.ReadOnly {
		if err := s.openJournal(ctx, c); err != nil {
			return nil, err
		}
	} else if c.Journal != "" {
		if s.Lock, err = journal.AcquireLock(c.Journal, journal.LockOptions{TakeOverStale: c.TakeOverStaleLock}); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.Lock.Release)
		if err := s.openJournal(ctx, c); err != nil {
			return nil, err
		}
	}
	if s.Queue, err = queue.Open(ctx, c.Queue, c.QueueOptions); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Queue.Close)
	if c.RequeueRunning {
		if s.Requeued, err = s.Queue.RequeueRunning(ctx); err != nil {
			return nil, err
		}
	}
	if c.StateOptions.Log.GetLevel() == zerolog.Disabled {
		c.StateOptions.Log = c.Log
	}
	if s.State, err = state.Open(ctx, c.State, c.StateOptions); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.State.Close)
	return s, nil
}

// openJournal opens the journal under the lock and recovers it: the last
// process is gone, so what it left dispatched is unknown.
func (s *Store) openJournal(ctx context.Context, c Config) error {
	if c.ExistingOnly {
		if _, err := os.Stat(c.Journal); err != nil {
			return nil
		}
	}
	j, err := journal.Open(ctx, c.Journal, journal.Options{Secrets: c.Secrets, Log: c.Log, OnCommit: c.OnJournalCommit,
		ReadOnly: c.ReadOnly})
	if err != nil {
		return err
	}
	s.Journal = j
	s.closers = append(s.closers, j.Close)
	if c.ReadOnly {
		return nil // recovery is the lock holder's: a read-only reader shows dispatched effects as they are
	}
	if s.Recovered, err = j.Recover(ctx); err != nil {
		return fmt.Errorf("journal recovery: %w", err)
	}
	return nil
}

// EffectJournal returns the journal as the interface, nil when there is
// none (a nil *Journal in an interface would not compare equal to nil).
func (s *Store) EffectJournal() touba.EffectJournal {
	if s.Journal == nil {
		return nil
	}
	return s.Journal
}

// Close closes the files and releases the lock, last opened first.
// Idempotent.
func (s *Store) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}
