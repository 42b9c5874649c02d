package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/schemacompat"
)

// The partitioning of today's unpartitioned tables (SPEC §8 "Rolling
// upgrades"), the contract step of 0015_history.sql. The previous
// release's intake decides identities with INSERT ... ON CONFLICT on the
// unique index (trigger_ref, event_id), which a partitioned table cannot
// have: so the tables are partitioned only once every live node knows
// 0015 (touba.nodes.migration), and the schema's oldest-compatible level
// is raised to 0015 first, in the same transaction as that check, so no
// node of the previous release starts on it after. Per table:
//
//  1. one transaction adds CHECK (kept = false AND key < B) NOT VALID: an
//     instant under ACCESS EXCLUSIVE, nothing scanned; B is a bound hours
//     ahead, the same for every table;
//  2. VALIDATE CONSTRAINT, alone on a connection of its own: it scans the
//     table under SHARE UPDATE EXCLUSIVE, which no read or write waits for;
//  3. one quick transaction renames the table <name>_old, creates the
//     partitioned <name> like it, and attaches <name>_old as the partition
//     [MINVALUE, B) of <name>_live: the valid constraint proves the bound,
//     so nothing is scanned; ACCESS EXCLUSIVE for an instant, under a
//     lock_timeout a quarter of the nodes' own, tried again when busy.
//
// Rows go on landing in <name>_old until B; after it, in time partitions.
// <name>_old is forgotten whole once B is past --history.

// partitionMigration is the migration that knows partitioned tables: the
// level the schema is raised to before any table is partitioned.
const partitionMigration = "0015_history.sql"

// Locks of the maintenance, pg_advisory_xact_lock keys: transaction level
// only, so a pooler in transaction mode keeps working.
const (
	maintLock = 0x746f75626168 // "toubah": one node at a time creates and drops partitions
)

// Keys in touba.meta.
const (
	metaBound = "partition_bound" // B of the conversion in progress or done
)

// convertMargin is how far ahead of now B is set for tables holding rows:
// longer than the validation of every table; a conversion not done by
// half of it starts over with a later B.
var convertMargin = 6 * time.Hour

// gate says which live nodes do not know partitionMigration ("" when
// none): the partitioning waits for them.
func (d *db) gate(ctx context.Context, q querier) (string, error) {
	rows, err := q.Query(ctx, `SELECT node_id || ' (' || COALESCE(NULLIF(version, ''), 'an older release') || ')' FROM touba.nodes
		WHERE heartbeat_at > now() - make_interval(secs => $1) AND migration < $2 ORDER BY node_id`,
		max(d.cfg.LeaseTTL, time.Minute).Seconds(), partitionMigration)
	if err != nil {
		return "", fmt.Errorf("nodes: %w", err)
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(old, ", "), err
}

// maintTx runs fn in a transaction of its own under lockTimeout, when the
// maintenance lock is free (ok false, fn not run, when another node holds
// it).
func (d *db) maintTx(ctx context.Context, fn func(tx pgx.Tx) error) (ok bool, err error) {
	err = pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{BeginQuery: d.begin}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d`,
			migrateLockTimeout(d.cfg.Timeout).Milliseconds(), migrateStatementTimeout.Milliseconds())); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, maintLock).Scan(&ok); err != nil || !ok {
			return err
		}
		return fn(tx)
	})
	return ok, err
}

// allPartitioned tells whether every table is partitioned.
func allPartitioned(ctx context.Context, q querier) (bool, error) {
	for _, t := range ptables {
		if ok, err := partitioned(ctx, q, t.name); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// convert partitions what is not yet, when no node of an older release
// runs; note says what it waits for.
func (d *db) convert(ctx context.Context, width time.Duration) (done bool, note string, err error) {
	if done, err = allPartitioned(ctx, d.pool); err != nil || done {
		return done, "", err
	}
	if old, err := d.gate(ctx, d.pool); err != nil || old != "" {
		return false, "tables not partitioned yet: waiting for nodes of an older release to stop: " + old, err
	}
	var bound string
	var empty bool
	ok, err := d.maintTx(ctx, func(tx pgx.Tx) error {
		var err error
		if bound, empty, err = d.startConversion(ctx, tx, width); err != nil || !empty || bound == "" {
			return err
		}
		// No row: the bounds were checked as they were added, and every
		// table is swapped in this same transaction.
		for _, t := range ptables {
			if err := swapTable(ctx, tx, t, bound); err != nil {
				return fmt.Errorf("partition %s: %w", t.name, err)
			}
		}
		return nil
	})
	if err != nil || !ok || bound == "" {
		return false, "tables not partitioned yet: another node is partitioning them", err
	}
	for _, t := range ptables {
		if err := d.convertTable(ctx, t, bound); err != nil {
			return false, "", fmt.Errorf("partition %s: %w", t.name, err)
		}
	}
	d.log.Info().Str("bound", bound).Msg("tables partitioned by time (SPEC §8.1)")
	if _, _, err := d.ensureAhead(ctx, width); err != nil {
		return true, "", err
	}
	return true, "", nil
}

// startConversion is the conversion's first transaction: under the
// migrations' lock, checks the nodes again, raises the schema's level,
// and adds the bound to the tables not partitioned yet: NOT VALID, or
// checked at once when no table holds a row (empty). It returns B.
func (d *db) startConversion(ctx context.Context, tx pgx.Tx, width time.Duration) (bound string, empty bool, err error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
		return "", false, err
	}
	if old, err := d.gate(ctx, tx); err != nil || old != "" {
		return "", false, err
	}
	var level string
	if err := tx.QueryRow(ctx, `SELECT COALESCE((SELECT value FROM touba.meta WHERE key = $1), '')`, schemacompat.KeyOldest).Scan(&level); err != nil {
		return "", false, err
	}
	if level < partitionMigration {
		if _, err := tx.Exec(ctx, `INSERT INTO touba.meta (key, value) VALUES ($1, $2), ($3, $4)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
			schemacompat.KeyOldest, partitionMigration, schemacompat.KeySetBy, newestMigration()); err != nil {
			return "", false, err
		}
	}
	if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM touba.entries) AND NOT EXISTS (SELECT 1 FROM touba.deliveries)`).Scan(&empty); err != nil {
		return "", false, err
	}
	if err := tx.QueryRow(ctx, `SELECT COALESCE((SELECT value FROM touba.meta WHERE key = $1), '')`, metaBound).Scan(&bound); err != nil {
		return "", false, err
	}
	now := d.cfg.Now().UnixMilli()
	if ms, ok := msOf(bound); ok && now > ms-convertMargin.Milliseconds()/2 {
		// Too late to finish before B: start over with a later one.
		for _, t := range ptables {
			if ok, err := partitioned(ctx, tx, t.name); err != nil {
				return "", false, err
			} else if !ok {
				if _, err := tx.Exec(ctx, `ALTER TABLE touba.`+t.name+` DROP CONSTRAINT IF EXISTS history_bound`); err != nil {
					return "", false, err
				}
			}
		}
		bound = ""
	}
	if bound == "" {
		// A new database: <t>_old takes what comes before the first
		// partitions a pass creates ahead; with rows: what comes while the
		// tables are converted.
		w, margin := width.Milliseconds(), partitionAhead(width).Milliseconds()
		if !empty {
			margin = convertMargin.Milliseconds()
		}
		at := ((now+margin)/w + 1) * w
		bound = idAt(at)
		if _, err := tx.Exec(ctx, `INSERT INTO touba.meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
			metaBound, bound); err != nil {
			return "", false, err
		}
	}
	if empty {
		for _, t := range ptables {
			if err := addBound(ctx, tx, t, bound, ""); err != nil {
				return "", false, err
			}
		}
	}
	return bound, empty, nil
}

// addBound adds t's bound (kept = false AND key < B), as valid as
// given (NOT VALID: rows not read), unless t has it or is partitioned.
func addBound(ctx context.Context, tx pgx.Tx, t ptable, bound, valid string) error {
	if ok, err := partitioned(ctx, tx, t.name); err != nil || ok {
		return err
	}
	check := fmt.Sprintf(`%s < %s`, t.key, quote(bound))
	if t.kept {
		check = "kept = false AND " + check
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'touba.%s'::regclass AND conname = 'history_bound') THEN
			ALTER TABLE touba.%s ADD CONSTRAINT history_bound CHECK (%s) %s;
		END IF; END $$`, t.name, t.name, check, valid), pgx.QueryExecModeSimpleProtocol)
	return err
}

// whileBusy runs fn in a maintenance transaction (maintTx) again while
// it gives up on a lock (lock_timeout, a deadlock): a busy table is
// tried again, up to migratePatience, and every wait of the nodes behind
// it stays as short as the transaction's lock_timeout.
func (d *db) whileBusy(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	wait, deadline := 100*time.Millisecond, time.Now().Add(migratePatience)
	for {
		_, err := d.maintTx(ctx, fn)
		if err == nil || !lockBusy(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: too busy for %s: %w", what, migratePatience, err)
		}
		d.log.Warn().Err(err).Str("step", what).Dur("retry_in", wait).Msg("partitioning waited past its lock_timeout; trying again")
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// convertTable adds t's bound NOT VALID, validates it online, then swaps
// t for the partitioned table in one quick transaction; each
// transaction again while busy.
func (d *db) convertTable(ctx context.Context, t ptable, bound string) error {
	if ok, err := partitioned(ctx, d.pool, t.name); err != nil || ok {
		return err
	}
	if err := d.whileBusy(ctx, "add the bound of "+t.name, func(tx pgx.Tx) error { return addBound(ctx, tx, t, bound, "NOT VALID") }); err != nil {
		return err
	}
	conn, err := (&migrator{pool: d.pool, timeout: d.cfg.Timeout, pooled: d.pooled, log: d.log}).onlineConn(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = conn.Exec(ctx, `ALTER TABLE touba.`+t.name+` VALIDATE CONSTRAINT history_bound`, pgx.QueryExecModeSimpleProtocol)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("validate its bound: %w", err)
	}
	d.log.Info().Str("table", t.name).Dur("took", time.Since(start)).Msg("partitioning: bound validated")
	return d.whileBusy(ctx, "swap "+t.name, func(tx pgx.Tx) error { return swapTable(ctx, tx, t, bound) })
}

// swapTable makes t partitioned, its rows the partition <t>_old: catalog
// changes only, sent in one round trip, under t's ACCESS EXCLUSIVE lock
// to the end of the transaction.
func swapTable(ctx context.Context, tx pgx.Tx, t ptable, bound string) error {
	if ok, err := partitioned(ctx, tx, t.name); err != nil || ok {
		return err
	}
	old, full := t.name+"_old", Schema+"."+t.name
	by := fmt.Sprintf("RANGE (%s)", t.key)
	if t.kept {
		by = "LIST (kept)"
	}
	triggers, err := tableTriggers(ctx, tx, t.name)
	if err != nil {
		return err
	}
	tmpl, err := indexTemplate(ctx, tx, t, t.name)
	if err != nil {
		return err
	}
	// A serial column's sequence belongs to the new table, so that
	// dropping <t>_old one day leaves it.
	var seq string
	if err := tx.QueryRow(ctx, `SELECT COALESCE((SELECT pg_get_serial_sequence($1, 'seq') FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'seq' AND NOT attisdropped), '')`, full).Scan(&seq); err != nil {
		return err
	}
	stmts := []string{
		fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, full, old),
		fmt.Sprintf(`CREATE TABLE %s (LIKE %s.%s INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY %s`, full, Schema, old, by),
		fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT history_bound`, full),
	}
	if t.kept {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE %s_live PARTITION OF %s FOR VALUES IN (false) PARTITION BY RANGE (%s)`, full, full, t.key))
		stmts = append(stmts, tableSQL(t, t.name+"_kept", tmpl, t.name, "IN (true)")...)
	}
	stmts = append(stmts, tableSQL(t, t.name+"_other", tmpl, t.rangeParent(), fmt.Sprintf("FROM (%s) TO (MAXVALUE)", quote(otherFrom)))...)
	stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s.%s ATTACH PARTITION %s.%s FOR VALUES FROM (MINVALUE) TO (%s)`,
		Schema, t.rangeParent(), Schema, old, quote(bound)))
	if seq != "" {
		stmts = append(stmts, fmt.Sprintf(`ALTER SEQUENCE %s OWNED BY %s.seq`, seq, full))
	}
	// The definitions were read before the rename: they name the new table.
	for _, tr := range triggers {
		stmts = append(stmts, fmt.Sprintf(`DROP TRIGGER %s ON %s.%s`, tr.name, Schema, old), tr.def)
	}
	if _, err := tx.Exec(ctx, strings.Join(stmts, ";\n")); err != nil {
		return fmt.Errorf("swap %s: %w", t.name, err)
	}
	return nil
}

type trig struct{ name, def string }

// tableTriggers are the triggers of table (before its rename), with
// their definitions: they move to the partitioned table, which gives them
// to every partition.
func tableTriggers(ctx context.Context, tx pgx.Tx, table string) ([]trig, error) {
	rows, err := tx.Query(ctx, `SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal ORDER BY tgname`,
		Schema+"."+table)
	if err != nil {
		return nil, err
	}
	var out []trig
	var t trig
	_, err = pgx.ForEachRow(rows, []any{&t.name, &t.def}, func() error { out = append(out, t); return nil })
	return out, err
}

// newestMigration is the last embedded migration: what this binary knows.
func newestMigration() string {
	ms, err := loadMigrations(migrations)
	if err != nil || len(ms) == 0 {
		return partitionMigration
	}
	return ms[len(ms)-1].name
}
