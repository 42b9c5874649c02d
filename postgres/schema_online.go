package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// Online steps (schema_migfile.go) build and drop indexes CONCURRENTLY: the build
// takes SHARE UPDATE EXCLUSIVE on its table, which no read or write waits
// for, so the nodes of both releases go on writing while it runs (a plain
// CREATE INDEX holds SHARE, which every INSERT waits for, to its end).
//
// Nodes starting together may all reach the same step; it needs no lock
// of its own (none could be held across the statements behind a pooler in
// transaction mode), because each statement is idempotent: a build whose
// index exists and is valid is done; one that exists invalid is either
// being built by another session, which holds its table's SHARE UPDATE
// EXCLUSIVE lock while it runs (then this node waits for it, as long as
// it goes on), or was left by an interrupted build (then it is dropped and
// built again). A second build of the same index waits on that lock too.
// A node stopped mid-build closes its connection without cancelling the
// statement, so the server finishes the build: the index ends valid, and
// the next start finds it so, or waits for it.

// onlineLockTimeout is an online statement's lock_timeout. It bounds the
// build's wait for its table's lock and, since a concurrent build waits
// through the lock manager, its waits for the transactions it must
// outlast: those writing the table, and at its end every older snapshot
// of the database. The nodes' own transactions end within
// --database-timeout, so three times that outlasts them; a longer one (an
// operator's open session) makes the build give up, and start again.
// None of these waits blocks anyone else.
func onlineLockTimeout(timeout time.Duration) time.Duration {
	return max(3*timeout, 5*time.Second)
}

// onlinePoll is how often a node looks again at a build it waits for.
const onlinePoll = 250 * time.Millisecond

// online runs an online step's statements, each to its end, on a
// connection of its own.
func (r *migrator) online(ctx context.Context, st mstep) error {
	if len(st.stmts) == 0 {
		return nil // a commit point (schema_migfile.go)
	}
	conn, err := r.onlineConn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
		defer cancel()
		conn.Close(cctx)
	}()
	for _, o := range st.stmts {
		log := r.log.With().Str("index", o.schema+"."+o.index).Logger()
		if o.create {
			err = r.build(ctx, conn, o, log)
		} else {
			err = r.drop(ctx, conn, o, log)
		}
		if err != nil {
			return fmt.Errorf("index %s.%s: %w", o.schema, o.index, err)
		}
	}
	return nil
}

// onlineConn is a connection outside the pool, so that nothing set on it
// stays with a pooled one: direct, with no statement_timeout (a build on a
// large table takes what it takes) and onlineLockTimeout. Behind a pooler
// in transaction mode, which refuses such startup parameters and may run
// each statement on another server connection, nothing can be set: the
// statements run with the role's settings.
func (r *migrator) onlineConn(ctx context.Context) (*pgx.Conn, error) {
	cc := r.pool.Config().ConnConfig.Copy()
	if !r.pooled {
		cc.RuntimeParams["statement_timeout"] = "0"
		cc.RuntimeParams["lock_timeout"] = fmt.Sprint(onlineLockTimeout(r.timeout).Milliseconds())
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect for an online migration step: %w", err)
	}
	return conn, nil
}

// build runs o, a CREATE INDEX CONCURRENTLY IF NOT EXISTS, until its
// index exists and is valid.
func (r *migrator) build(ctx context.Context, conn *pgx.Conn, o onlineStmt, log zerolog.Logger) error {
	wait, deadline, logged := onlinePoll, time.Now().Add(migratePatience), time.Time{}
	for {
		valid, exists, err := indexState(ctx, conn, o)
		if err != nil {
			return err
		}
		var busy error // why this round did not end it: a lock timeout
		switch {
		case valid:
			return nil
		case exists:
			builder, err := indexBuilder(ctx, conn, o)
			if err != nil {
				return err
			}
			if builder != "" {
				deadline, wait = time.Now().Add(migratePatience), onlinePoll
				if time.Since(logged) >= 30*time.Second {
					log.Info().Str("builder", builder).Msg("waiting for another session's build of the index")
					logged = time.Now()
				}
				break
			}
			log.Warn().Msg("index left invalid by an interrupted build: dropping it, to build it again")
			if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+o.schema+`.`+o.index, pgx.QueryExecModeSimpleProtocol); err == nil {
				continue
			} else if !lockBusy(err) {
				return fmt.Errorf("drop the invalid index: %w", err)
			} else {
				busy = err
			}
		default:
			start := time.Now()
			_, err := conn.Exec(ctx, o.sql, pgx.QueryExecModeSimpleProtocol)
			if err == nil {
				log.Info().Dur("took", time.Since(start)).Msg("index built online")
				continue // and check: IF NOT EXISTS skips one that another session began meanwhile
			}
			if ctx.Err() != nil {
				return err
			}
			if !lockBusy(err) && !nameTaken(err) {
				// Leave the schema as it was: no invalid index behind.
				if _, derr := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+o.schema+`.`+o.index, pgx.QueryExecModeSimpleProtocol); derr != nil {
					log.Warn().Err(derr).Msg("drop the index of a failed build")
				}
				return buildFailed(err, r.pooled)
			}
			busy = err
		}
		if busy != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("gave up after %s of lock timeouts: %w (oldest transactions: %s)", migratePatience, busy, oldestTransactions(ctx, conn))
			}
			log.Warn().Err(busy).Dur("retry_in", wait).Msg("online index build waited past its lock_timeout; trying again")
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		if busy != nil {
			wait = min(2*wait, 5*time.Second)
		}
	}
}

// drop runs o, a DROP INDEX CONCURRENTLY IF EXISTS, again while it gives
// up on a lock. Idempotent: a drop that was interrupted left the index
// invalid, and the next one ends it.
func (r *migrator) drop(ctx context.Context, conn *pgx.Conn, o onlineStmt, log zerolog.Logger) error {
	wait, deadline := onlinePoll, time.Now().Add(migratePatience)
	for {
		_, err := conn.Exec(ctx, o.sql, pgx.QueryExecModeSimpleProtocol)
		if err == nil || !lockBusy(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s of lock timeouts: %w (oldest transactions: %s)", migratePatience, err, oldestTransactions(ctx, conn))
		}
		log.Warn().Err(err).Dur("retry_in", wait).Msg("online index drop waited past its lock_timeout; trying again")
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// indexState tells whether o's index exists, and is valid (built to its
// end). An index of that name on another table is an error: IF NOT EXISTS
// would take it for o's.
func indexState(ctx context.Context, conn *pgx.Conn, o onlineStmt) (valid, exists bool, err error) {
	var onTable bool
	err = conn.QueryRow(ctx, `SELECT i.indisvalid, i.indrelid = to_regclass($3)::oid FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, o.schema, o.index, o.schema+"."+o.table).Scan(&valid, &onTable)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, err
	case !onTable:
		return false, true, fmt.Errorf("an index named %s.%s exists on another table than %s", o.schema, o.index, o.table)
	}
	return valid, true, nil
}

// indexBuilder describes the other sessions building an index on o's
// table right now ("" when none): they hold its SHARE UPDATE EXCLUSIVE
// lock and show in pg_stat_progress_create_index (pid only, for another
// role's session).
func indexBuilder(ctx context.Context, conn *pgx.Conn, o onlineStmt) (string, error) {
	var s string
	err := conn.QueryRow(ctx, `SELECT COALESCE(string_agg(format('pid %s (%s, block %s of %s)', p.pid, COALESCE(p.phase, '?'),
			COALESCE(p.blocks_done::text, '?'), COALESCE(p.blocks_total::text, '?')), '; '), '')
		FROM pg_locks l JOIN pg_stat_progress_create_index p ON p.pid = l.pid
		WHERE l.locktype = 'relation' AND l.relation = to_regclass($1)::oid AND l.granted
		  AND l.mode = 'ShareUpdateExclusiveLock' AND l.pid <> pg_backend_pid()
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, o.schema+"."+o.table).Scan(&s)
	return s, err
}

// oldestTransactions names the database's oldest open transactions: what
// a build that gives up on its lock_timeout was waiting for.
func oldestTransactions(ctx context.Context, conn *pgx.Conn) string {
	var s string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(string_agg(t, '; '), 'none') FROM (
		SELECT format('pid %s %s since %s: %s', pid, state, xact_start, left(query, 80)) AS t FROM pg_stat_activity
		WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
		ORDER BY xact_start LIMIT 3) o`).Scan(&s); err != nil {
		return err.Error()
	}
	return s
}

// nameTaken is the race of two builds creating the same index name: the
// loser finds the other's index at its next look.
func nameTaken(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "pg_class_relname_nsp_index"
}

// buildFailed explains a build's failure that trying again will not
// change.
func buildFailed(err error, pooled bool) error {
	var pe *pgconn.PgError
	if pooled && errors.As(err, &pe) && pe.Code == "57014" {
		return fmt.Errorf("%w: behind a connection pooler the build runs with the role's statement_timeout; "+
			"set it to 0 for the role (ALTER ROLE ... SET statement_timeout = 0) or start one node with a direct URL", err)
	}
	return err
}
