// Package journal is the effect journal of touba-trigger (SPEC §5): a SQLite
// file in the touba-effect-journal-v1 format that records, for every external
// write, prepared before the handler starts, dispatched just before the
// request leaves, then applied, not_applied or unknown. It also owns the
// journal's lock file and the start-up recovery that turns every dispatched
// effect into unknown.
//
// Transitions are written by one writer goroutine with group commit: calls
// from many dispatcher workers share one transaction and one fsync, and each
// call returns only once its own transition is on disk.
//
// The journal knows nothing of HTTP, queues or handlers; the dispatcher
// decides what a stored state means for a run (SPEC §5's table).
package journal

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

// Format is the value of meta('format') of an effect journal file.
const Format = "touba-effect-journal-v1"

// Operations of an effect (SPEC §4): a normal call, or an operator's
// compensation of an applied effect.
const (
	OperationInvoke     = touba.OperationInvoke
	OperationCompensate = touba.OperationCompensate
)

//go:embed migrations/*.sql
var migrations embed.FS

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("effect journal closed")

// Options configures Open. The zero value works: time.Now, no secrets, no
// logs.
type Options struct {
	// Now gives the time of every stored timestamp; always stored as UTC.
	Now func() time.Time
	// Secrets are the resolved secret values of the configuration; nothing
	// holding one of them is stored (SecretValueRefused).
	Secrets *secret.Set
	// Log receives the journal's own warnings and errors.
	Log zerolog.Logger
	// OnCommit, when set, is called by the writer after each batch with its
	// number of transitions and how long the commit took (for metrics).
	OnCommit func(transitions int, took time.Duration)
	// ReadOnly opens an existing journal for reading only (the operator's
	// read-only commands with no daemon, without the lock): no migration,
	// no writer, no recovery; every change fails with sqlitex.ErrReadOnly.
	ReadOnly bool
}

// Journal is an open effect journal file. It is safe for concurrent use.
type Journal struct {
	db      *sqlitex.DB
	now     func() time.Time
	secrets *secret.Set
	log     zerolog.Logger
	owner   string // this handle's id in effects.owner

	// claims holds the identities this process is working on right now,
	// each with the call_id that holds it: the in-memory half of the
	// reservation, released by the outcome.
	claimMu sync.Mutex
	claims  map[string]string

	w         *sqlitex.Writer
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the effect journal at path and starts its
// writer. A file whose format is not touba-effect-journal-v1 is refused
// with code ConfigInvalid. Open does not take the lock: callers that own
// the file take AcquireLock first, then call Recover once before the first
// Prepare.
func Open(ctx context.Context, path string, opts Options) (*Journal, error) {
	if opts.ReadOnly {
		return openReadOnly(ctx, path, opts)
	}
	db, err := sqlitex.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open effect journal: %w", err)
	}
	if err := prepareFile(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	j := &Journal{
		db:      db,
		now:     opts.Now,
		secrets: opts.Secrets,
		log:     opts.Log.With().Str("component", "journal").Logger(),
		owner:   uuidv7.New(),
		claims:  make(map[string]string),
	}
	if j.now == nil {
		j.now = time.Now
	}
	if err := j.startWriter(ctx, opts.OnCommit); err != nil {
		db.Close()
		return nil, fmt.Errorf("open effect journal: %w", err)
	}
	return j, nil
}

// prepareFile checks the format of an existing file, applies the
// migrations, and checks the format again.
func prepareFile(ctx context.Context, db *sqlitex.DB) error {
	if err := checkFormat(ctx, db, true); err != nil {
		return err
	}
	if err := sqlitex.Migrate(ctx, db, migrations, "migrations"); err != nil {
		return fmt.Errorf("open effect journal: %w", err)
	}
	return checkFormat(ctx, db, false)
}

// checkFormat refuses a file that is some other SQLite file (tables but no
// meta) or another format. Before migrating, a file with no table but
// schema_migrations is new (or was cut before its first migration).
func checkFormat(ctx context.Context, db *sqlitex.DB, beforeMigrate bool) error {
	rows, err := db.Write.QueryContext(ctx,
		`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		return fmt.Errorf("open effect journal %s: %w", db.Path, err)
	}
	tables := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("open effect journal %s: %w", db.Path, err)
		}
		tables[name] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("open effect journal %s: %w", db.Path, err)
	}
	if !tables["meta"] {
		delete(tables, "schema_migrations")
		if beforeMigrate && len(tables) == 0 {
			return nil
		}
		return touba.Errorf(touba.ECONFIG, "%s is not a %s file (no meta table)", db.Path, Format)
	}
	var format string
	err = db.Write.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'format'`).Scan(&format)
	if err != nil {
		return touba.Errorf(touba.ECONFIG, "%s is not a %s file: no format in meta (%v)", db.Path, Format, err)
	}
	if format != Format {
		return touba.Errorf(touba.ECONFIG, "%s has format %q, want %q", db.Path, format, Format)
	}
	return nil
}

// Close stops the writer once the transitions already submitted are
// committed, then closes the file. An effect this handle still holds as
// dispatched is recorded unknown (its outcome was never reported, SPEC
// §3.3); one still prepared is released for a new attempt. Close is
// idempotent.
func (j *Journal) Close() error {
	j.closeOnce.Do(func() {
		if j.w == nil { // read-only: it holds nothing
			j.closeErr = j.db.Close()
			return
		}
		j.w.Close()
		err := j.abandon(context.Background())
		j.closeErr = errors.Join(err, j.db.Close())
	})
	return j.closeErr
}

// Path returns the file name of the journal.
func (j *Journal) Path() string { return j.db.Path }

func (j *Journal) stamp() string { return touba.FormatTime(j.now()) }

func claimKey(scope, effectID string) string { return scope + "\x00" + effectID }

// claim takes the in-memory reservation of an identity for callID; false
// when another call holds it.
func (j *Journal) claim(scope, effectID, callID string) bool {
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	k := claimKey(scope, effectID)
	if _, held := j.claims[k]; held {
		return false
	}
	j.claims[k] = callID
	return true
}

// holds reports whether callID holds the identity in this process.
func (j *Journal) holds(scope, effectID, callID string) bool {
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	c, ok := j.claims[claimKey(scope, effectID)]
	return ok && c == callID
}

// release drops callID's reservation of an identity, if it holds it.
func (j *Journal) release(scope, effectID, callID string) {
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	k := claimKey(scope, effectID)
	if j.claims[k] == callID {
		delete(j.claims, k)
	}
}

var _ touba.EffectJournal = (*Journal)(nil)

// JournalStats returns a snapshot of the writer's counters.
func (j *Journal) JournalStats() touba.JournalStats { return j.Stats() }

// openReadOnly is Open with opts.ReadOnly.
func openReadOnly(ctx context.Context, path string, opts Options) (*Journal, error) {
	db, err := sqlitex.OpenReadOnly(path)
	if err != nil {
		return nil, fmt.Errorf("open effect journal: %w", err)
	}
	if err := checkFormat(ctx, db, false); err != nil {
		db.Close()
		return nil, err
	}
	if err := sqlitex.CheckMigrated(ctx, db, migrations, "migrations"); err != nil {
		db.Close()
		return nil, fmt.Errorf("open effect journal: %w", err)
	}
	j := &Journal{db: db, now: opts.Now, secrets: opts.Secrets, log: opts.Log.With().Str("component", "journal").Logger(),
		owner: uuidv7.New(), claims: make(map[string]string)}
	if j.now == nil {
		j.now = time.Now
	}
	return j, nil
}
