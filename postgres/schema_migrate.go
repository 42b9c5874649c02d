package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/schemacompat"
)

// migrateLock is the pg_advisory_xact_lock key under which nodes migrate:
// one at a time, the others wait and find the work done. Transaction
// level: a session-level lock would stay with a pooler's server connection.
const migrateLock = 0x746f756261 // "touba"

// migrateStatementTimeout bounds a transactional step's statement (a
// backfill) and a node's wait on the lock for another node's step.
const migrateStatementTimeout = 10 * time.Minute

// migratePatience is how long a migration goes on trying again steps that
// fail on a busy table (lock_timeout, a deadlock), or waiting for a lock
// no index build holds, before the node refuses start-up with the reason.
// Waiting for another session's index build that goes on does not count.
var migratePatience = 5 * time.Minute

// migrateLockTimeout is a transactional step's lock_timeout: a quarter of
// a node's own, so that a node's statement queued behind the step's lock
// request (an ALTER TABLE's ACCESS EXCLUSIVE), which waits for as long as
// the step does and then for the rest of its transaction, gives up well
// after the step does.
func migrateLockTimeout(timeout time.Duration) time.Duration {
	return max(lockTimeout(timeout)/4, 25*time.Millisecond)
}

// migrator applies migrations: transactional steps under the advisory
// lock, online steps between those transactions (schema_online.go).
type migrator struct {
	pool    *pgxpool.Pool
	ms      []migration
	newest  string // the last of ms: what this binary knows
	timeout time.Duration
	pooled  bool
	log     zerolog.Logger
}

// position is one step of one migration.
type position struct {
	m    *migration
	step int
}

// migrate applies the embedded migrations not yet recorded, refusing a
// schema that needs a newer binary (SchemaTooNew), and checks the
// journal's format.
func migrate(ctx context.Context, pool *pgxpool.Pool, c Config, pooled bool) error {
	ms, err := loadMigrations(migrations)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := newMigrator(pool, ms, c.Timeout, pooled, c.Log).run(ctx); err != nil {
		if touba.ErrorCode(err) == touba.ESchemaTooNew {
			return err
		}
		return fmt.Errorf("migrate: %w", err)
	}
	var format string
	if err := pool.QueryRow(ctx, `SELECT value FROM `+Schema+`.meta WHERE key = 'format'`).Scan(&format); err != nil || format != "touba-effect-journal-v1" {
		return touba.Errorf(touba.ECONFIG, "schema %s: journal format %q, want touba-effect-journal-v1 (%v)", Schema, format, err)
	}
	return nil
}

func newMigrator(pool *pgxpool.Pool, ms []migration, timeout time.Duration, pooled bool, log zerolog.Logger) *migrator {
	r := &migrator{pool: pool, ms: ms, timeout: timeout, pooled: pooled, log: log.With().Str("component", "migrate").Logger()}
	if len(ms) > 0 {
		r.newest = ms[len(ms)-1].name
	}
	return r
}

// run applies every step not yet recorded. An online step runs between
// two transactions; the next one records it.
func (r *migrator) run(ctx context.Context) error {
	var done *position
	for again := 0; ; {
		next, err := r.transaction(ctx, done)
		if err != nil || next == nil {
			return err
		}
		// A step handed back once it ran: its index went invalid or away
		// again before the record (another session dropped it). That is
		// no race that lasts: give up rather than build for ever.
		if next.m == nil { // a commit between two migrations
			done = nil
			continue
		}
		if done != nil && *next == *done {
			if again++; again == 3 {
				return fmt.Errorf("%s: online step %d: its indexes are not valid after it ran %d times", next.m.name, next.step, again)
			}
		} else {
			again = 0
		}
		if err := r.online(ctx, next.m.steps[next.step]); err != nil {
			return fmt.Errorf("%s: %w", next.m.name, err)
		}
		done = next
	}
}

// transaction runs r.steps in one transaction, again while a table is
// too busy for a step's lock (each try waits lock_timeout at most, so the
// nodes' writes behind it wait no longer).
func (r *migrator) transaction(ctx context.Context, done *position) (*position, error) {
	wait, deadline := 100*time.Millisecond, time.Now().Add(migratePatience)
	for {
		var next *position
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) (err error) {
			next, err = r.steps(ctx, tx, done)
			return err
		})
		if err == nil {
			return next, nil
		}
		if !lockBusy(err) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("tables too busy for the migration's locks for %s: %w", migratePatience, err)
		}
		r.log.Warn().Err(err).Dur("retry_in", wait).Msg("migration step waited past its lock_timeout; trying again")
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, err
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// steps records done (an online step that ran), then runs the
// transactional steps not yet recorded, in order, each with its record,
// up to the first online step, which it returns (nil: all applied), or
// to the end of a migration (an empty position: commit, and go on). A
// schema created in this transaction (no migration recorded) runs its
// online steps inline and all its migrations in this one transaction: its
// tables are new, no one else sees them.
func (r *migrator) steps(ctx context.Context, tx pgx.Tx, done *position) (*position, error) {
	// The wait for the lock blocks no one: bounded by the statement
	// timeout, not by lock_timeout, which bounds the steps' table locks.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL statement_timeout = %d; SET LOCAL idle_in_transaction_session_timeout = %d;
		SET LOCAL lock_timeout = 0`, migrateStatementTimeout.Milliseconds(), r.timeout.Milliseconds())); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
		return nil, fmt.Errorf("advisory lock: %w", err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, migrateLockTimeout(r.timeout).Milliseconds())); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+Schema+`;
		CREATE TABLE IF NOT EXISTS `+Schema+`.schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL);
		CREATE TABLE IF NOT EXISTS `+Schema+`.schema_migration_steps (name TEXT NOT NULL, step INTEGER NOT NULL,
			applied_at TEXT NOT NULL, PRIMARY KEY (name, step))`); err != nil {
		return nil, err
	}
	level, by, err := r.level(ctx, tx)
	if err != nil {
		return nil, err
	}
	if err := schemacompat.Check("the database's schema "+Schema, r.newest, level, by); err != nil {
		return nil, err
	}
	applied, stepped, err := r.applied(ctx, tx)
	if err != nil {
		return nil, err
	}
	fresh := len(applied) == 0 && len(stepped) == 0
	if done != nil && !applied[done.m.name] {
		if err := r.recordOnline(ctx, tx, *done, applied, stepped); err != nil {
			return nil, err
		}
	}
	want := r.ms[0].name // no directive: any binary that knows the schema at all
	for i := range r.ms {
		m := &r.ms[i]
		if m.oldest > want && (applied[m.name] || len(stepped[m.name]) > 0) {
			want = m.oldest
		}
	}
	for i := range r.ms {
		m := &r.ms[i]
		if applied[m.name] {
			continue
		}
		// Before any of the migration's changes commit, so no binary it
		// excludes starts on them.
		if err := r.raise(ctx, tx, m.oldest); err != nil {
			return nil, err
		}
		for s, st := range m.steps {
			if stepped[m.name][s] {
				continue
			}
			if st.online && !fresh {
				return &position{m, s}, r.raise(ctx, tx, want)
			}
			if err := r.runStep(ctx, tx, st); err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			if err := r.record(ctx, tx, position{m, s}); err != nil {
				return nil, err
			}
		}
		applied[m.name] = true
		want = max(want, m.oldest)
		if !fresh && i < len(r.ms)-1 {
			// Each migration of a live schema commits alone: holding one
			// busy table's lock while waiting for another's (0018's
			// triggers on entries, then 0019's ALTER of effects) deadlocks
			// with the nodes' own transactions, which take them in the
			// other order, and a try that waits on several tables at once
			// seldom finds all of them free under load.
			return &position{}, r.raise(ctx, tx, want)
		}
	}
	return nil, r.raise(ctx, tx, want)
}

// runStep runs a transactional step, or an online one inline.
func (r *migrator) runStep(ctx context.Context, tx pgx.Tx, st mstep) error {
	if !st.online {
		_, err := tx.Exec(ctx, `SET LOCAL search_path TO `+Schema+`;`+st.sql+"\n;SET LOCAL search_path TO DEFAULT")
		return err
	}
	for _, o := range st.stmts {
		if _, err := tx.Exec(ctx, o.inline); err != nil {
			return err
		}
	}
	return nil
}

// applied reads the recorded migrations and the recorded steps of those
// begun and not finished.
func (r *migrator) applied(ctx context.Context, tx pgx.Tx) (map[string]bool, map[string]map[int]bool, error) {
	applied, stepped := map[string]bool{}, map[string]map[int]bool{}
	rows, err := tx.Query(ctx, `SELECT name FROM `+Schema+`.schema_migrations`)
	if err != nil {
		return nil, nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, err
	}
	for _, n := range names {
		applied[n] = true
	}
	rows, err = tx.Query(ctx, `SELECT name, step FROM `+Schema+`.schema_migration_steps`)
	if err != nil {
		return nil, nil, err
	}
	var name string
	var step int
	_, err = pgx.ForEachRow(rows, []any{&name, &step}, func() error {
		if stepped[name] == nil {
			stepped[name] = map[int]bool{}
		}
		stepped[name][step] = true
		return nil
	})
	return applied, stepped, err
}

// record records that step p ran; its last step records the migration.
func (r *migrator) record(ctx context.Context, tx pgx.Tx, p position) error {
	at := touba.FormatTime(time.Now())
	if p.step < len(p.m.steps)-1 {
		_, err := tx.Exec(ctx, `INSERT INTO `+Schema+`.schema_migration_steps (name, step, applied_at) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, p.m.name, p.step, at)
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+Schema+`.schema_migrations (name, applied_at) VALUES ($1, $2) ON CONFLICT DO NOTHING;`,
		p.m.name, at)
	if err == nil {
		_, err = tx.Exec(ctx, `DELETE FROM `+Schema+`.schema_migration_steps WHERE name = $1`, p.m.name)
	}
	return err
}

// recordOnline records the online step p once every index it builds is
// valid (another session may have dropped one meanwhile: then the step is
// left unrecorded, and runs again).
func (r *migrator) recordOnline(ctx context.Context, tx pgx.Tx, p position, applied map[string]bool, stepped map[string]map[int]bool) error {
	for _, o := range p.m.steps[p.step].stmts {
		if !o.create {
			continue
		}
		var valid bool
		err := tx.QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, o.schema, o.index).Scan(&valid)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !valid) {
			r.log.Warn().Str("index", o.schema+"."+o.index).Msg("index built online is gone or invalid again; building it again")
			return nil
		} else if err != nil {
			return err
		}
	}
	if err := r.record(ctx, tx, p); err != nil {
		return err
	}
	if p.step == len(p.m.steps)-1 {
		applied[p.m.name] = true
	} else {
		if stepped[p.m.name] == nil {
			stepped[p.m.name] = map[int]bool{}
		}
		stepped[p.m.name][p.step] = true
	}
	return nil
}

// level is the schema's recorded oldest-compatible level and the newest
// migration of the binary that recorded it ("" before any was).
func (r *migrator) level(ctx context.Context, tx pgx.Tx) (level, by string, err error) {
	if ok, err := metaExists(ctx, tx); err != nil || !ok {
		return "", "", err
	}
	err = tx.QueryRow(ctx, `SELECT COALESCE(MAX(value) FILTER (WHERE key = $1), ''), COALESCE(MAX(value) FILTER (WHERE key = $2), '')
		FROM `+Schema+`.meta`, schemacompat.KeyOldest, schemacompat.KeySetBy).Scan(&level, &by)
	return level, by, err
}

// raise records level as the schema's oldest-compatible one unless it
// records one as high already (a newer release's): a level only rises.
// Before the first migration made the meta table, there is nothing to
// raise: the end of the transaction records the level.
func (r *migrator) raise(ctx context.Context, tx pgx.Tx, level string) error {
	if level == "" {
		return nil
	}
	if ok, err := metaExists(ctx, tx); err != nil || !ok {
		return err
	}
	have, _, err := r.level(ctx, tx)
	if err != nil || level <= have {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+Schema+`.meta (key, value) VALUES ($1, $2), ($3, $4)
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, schemacompat.KeyOldest, level, schemacompat.KeySetBy, r.newest)
	return err
}

// metaExists tells whether the first migration made touba.meta yet.
func metaExists(ctx context.Context, tx pgx.Tx) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, Schema+".meta").Scan(&ok)
	return ok, err
}

// lockBusy tells a statement that gave up on a lock (lock_timeout) or was
// chosen to end a deadlock: the table was busy, trying again may succeed.
func lockBusy(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01")
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
