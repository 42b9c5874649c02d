package server

import (
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// What the CLI needs of the SQLite files when no daemon runs, so that it
// reaches storage only through this package.

// ErrNoFiles is OpenFiles' error, read-only, when the queue or state file
// does not exist: the CLI then creates nothing an operator only meant to
// look at.
var ErrNoFiles = sqlite.ErrNoFiles

// ErrSchemaBehind is OpenFiles' error, read-only, when a file's schema is
// older than this binary's: the CLI opens it again for writing, which
// migrates it.
var ErrSchemaBehind = sqlitex.ErrSchemaBehind

// JournalLock is the lock record of an effect journal file.
type JournalLock = journal.LockRecord

// UnlockJournal removes the lock record of the effect journal at path
// after the checks of a take-over (this host, this boot, its pid gone): a
// live holder is refused, JournalLocked. It returns the record removed,
// nil when there was none.
func UnlockJournal(path string) (*JournalLock, error) { return journal.Unlock(path) }

// JournalLockPath is where the lock record of the journal at path lives.
func JournalLockPath(path string) string { return journal.LockPath(path) }
