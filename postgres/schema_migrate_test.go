package postgres

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/schemacompat"
)

// old0013 and old0014 are the migrations as the releases before issue 33
// ran them: plain index builds in the migration's transaction.
const (
	old0013 = `CREATE UNIQUE INDEX effect_events_key ON touba.effect_events (scope, effect_id, seq);
ALTER TABLE touba.effect_events DROP CONSTRAINT effect_events_pkey,
  ADD CONSTRAINT effect_events_pkey PRIMARY KEY USING INDEX effect_events_key;
DROP INDEX touba.effect_events_effect;`
	old0014 = `ALTER TABLE touba.entries ADD COLUMN hold_on text;
CREATE INDEX entries_hold ON touba.entries (hold_on, queue_id COLLATE "C") WHERE status = 'pending' AND hold_on IS NOT NULL;`
)

// embeddedMigrations are this binary's migrations, parsed.
func embeddedMigrations(t testing.TB) []migration {
	t.Helper()
	ms, err := loadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// migrationsThrough are this binary's migrations up to the one whose name
// starts with last.
func migrationsThrough(t testing.TB, last string) []migration {
	t.Helper()
	ms := embeddedMigrations(t)
	for i, m := range ms {
		if strings.HasPrefix(m.name, last) {
			return ms[:i+1]
		}
	}
	t.Fatalf("no migration %s", last)
	return nil
}

// oldMigrations are the migrations as the release before issue 33 had them.
func oldMigrations(t testing.TB) []migration {
	t.Helper()
	ms := migrationsThrough(t, "0012")
	for name, body := range map[string]string{"0013_pgspeed_event_key.sql": old0013, "0014_fair.sql": old0014} {
		m, err := parseMigration(name, body)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].name < ms[j].name })
	return ms
}

// migratePool is a pool on url as a node with --database-timeout timeout
// would open it.
func migratePool(t testing.TB, url string, timeout time.Duration) (*pgxpool.Pool, bool) {
	t.Helper()
	pool, pooled, err := connect(context.Background(), Config{URL: url, NodeID: "migrate-test", Timeout: timeout, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, pooled
}

// runMigrations applies ms to url as a node with timeout would.
func runMigrations(ctx context.Context, t testing.TB, url string, ms []migration, timeout time.Duration) error {
	t.Helper()
	pool, pooled := migratePool(t, url, timeout)
	return newMigrator(pool, ms, timeout, pooled, zerolog.Nop()).run(ctx)
}

// superConn is a connection with none of a node's timeouts, for a test's
// own setup.
func superConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", firstLine(strings.TrimSpace(sql)), err)
	}
}

// schemaShape is what a migrated schema is made of: its columns, indexes
// and constraints, the recorded migrations and level.
func schemaShape(t testing.TB, conn *pgx.Conn) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '')
			FROM information_schema.columns WHERE table_schema = 'touba' ORDER BY 1`,
		`SELECT indexdef FROM pg_indexes WHERE schemaname = 'touba' ORDER BY indexname`,
		`SELECT c.conrelid::regclass || ' ' || c.conname || ' ' || pg_get_constraintdef(c.oid) FROM pg_constraint c
			JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'touba' ORDER BY 1`,
		`SELECT 'invalid index ' || indexrelid::regclass FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'touba' AND NOT i.indisvalid`,
		`SELECT 'migration ' || name FROM touba.schema_migrations ORDER BY name`,
		`SELECT 'step ' || name || ' ' || step FROM touba.schema_migration_steps ORDER BY 1`,
		`SELECT 'meta ' || key || '=' || value FROM touba.meta ORDER BY key`,
	} {
		rows, err := conn.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	return b.String()
}

// A database upgraded from 0012 online, one created by this binary (its
// online steps inline, in one transaction) and one that the release
// before issue 33 migrated (plain builds) end with the same schema: the
// new form of 0013 and 0014 changes nothing for a database that applied
// the old one (migrations are recorded by name, with no checksum).
func TestOnlineMigrationsMakeTheSameSchema(t *testing.T) {
	ctx := context.Background()
	shapes := map[string]string{}
	for _, how := range []string{"fresh", "upgraded", "old release"} {
		url := pgtest.New(t)
		var err error
		switch how {
		case "fresh":
			err = runMigrations(ctx, t, url, embeddedMigrations(t), DefaultTimeout)
		case "upgraded":
			if err = runMigrations(ctx, t, url, migrationsThrough(t, "0012"), DefaultTimeout); err == nil {
				err = runMigrations(ctx, t, url, embeddedMigrations(t), DefaultTimeout)
			}
		case "old release":
			if err = runMigrations(ctx, t, url, oldMigrations(t), DefaultTimeout); err == nil {
				err = runMigrations(ctx, t, url, embeddedMigrations(t), DefaultTimeout) // this binary on it: nothing to do
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		// Who set the level is the binary that migrated first: here one
		// that knew up to 0012, for the upgraded database.
		shapes[how] = regexp.MustCompile(`meta oldest_compatible_set_by=.*\n`).ReplaceAllString(schemaShape(t, superConn(t, url)), "")
	}
	if !strings.Contains(shapes["fresh"], "effect_events_pkey ON touba.effect_events USING btree (scope, effect_id, seq)") ||
		!strings.Contains(shapes["fresh"], "entries_hold") || strings.Contains(shapes["fresh"], "effect_events_effect") {
		t.Fatalf("fresh schema lacks 0013 or 0014:\n%s", shapes["fresh"])
	}
	for _, how := range []string{"upgraded", "old release"} {
		if shapes[how] != shapes["fresh"] {
			t.Errorf("%s schema differs from a fresh one:\n%s\nfresh:\n%s", how, shapes[how], shapes["fresh"])
		}
	}
}

// Migrating a database that is up to date changes nothing: no step runs
// again, no index is rebuilt (same relfilenodes), nothing is recorded.
func TestMigrateTwiceIsANoOp(t *testing.T) {
	ctx := context.Background()
	for _, from := range []string{"fresh", "0012"} {
		t.Run(from, func(t *testing.T) {
			url := pgtest.New(t)
			if from != "fresh" {
				if err := runMigrations(ctx, t, url, migrationsThrough(t, from), DefaultTimeout); err != nil {
					t.Fatal(err)
				}
			}
			conn := superConn(t, url)
			snapshot := func() string {
				var files string
				if err := conn.QueryRow(ctx, `SELECT string_agg(c.relname || '=' || c.relfilenode, ' ' ORDER BY c.relname)
					FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'touba'`).Scan(&files); err != nil {
					t.Fatal(err)
				}
				var applied string
				if err := conn.QueryRow(ctx, `SELECT string_agg(name || '@' || applied_at, ' ' ORDER BY name) FROM touba.schema_migrations`).Scan(&applied); err != nil {
					t.Fatal(err)
				}
				return schemaShape(t, conn) + files + "\n" + applied
			}
			var first string
			for i := range 3 {
				st, err := Open(ctx, Config{URL: url, NodeID: fmt.Sprintf("twice-%d", i)})
				if err != nil {
					t.Fatalf("open %d: %v", i, err)
				}
				if got, want := st.SchemaVersion, "0024_effect_settled.sql"; got != want {
					t.Errorf("schema version %q, want %q", got, want)
				}
				st.Close()
				if i == 0 {
					first = snapshot()
				} else if got := snapshot(); got != first {
					t.Fatalf("open %d changed the schema:\n%s\nwas:\n%s", i, got, first)
				}
			}
		})
	}
}

// SPEC §8: the schema records the oldest release that can run on it; a
// binary older than that refuses start-up, SchemaTooNew, naming both;
// and a binary runs on the schema of a newer release that did not raise
// the level (release N on N+1's), which it leaves as it is.
func TestSchemaTooNew(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	st, err := Open(ctx, Config{URL: url, NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	conn := superConn(t, url)
	meta := func() (level, by string) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT (SELECT value FROM touba.meta WHERE key = $1), (SELECT value FROM touba.meta WHERE key = $2)`,
			schemacompat.KeyOldest, schemacompat.KeySetBy).Scan(&level, &by); err != nil {
			t.Fatal(err)
		}
		return level, by
	}
	// A new database is partitioned at once (SPEC §8.1): no release
	// before 0015 runs on partitioned tables (history_partition_convert.go).
	if level, by := meta(); level != "0015_history.sql" || by != "0024_effect_settled.sql" {
		t.Fatalf("recorded level %q set by %q, want 0015_history.sql set by 0024_effect_settled.sql", level, by)
	}

	// Release N+1 applied an additive migration and kept the level: this
	// binary starts, and lowers nothing.
	mustExec(t, conn, `ALTER TABLE touba.entries ADD COLUMN next_release TEXT`)
	mustExec(t, conn, `INSERT INTO touba.schema_migrations (name, applied_at) VALUES ('0042_next.sql', '2027-01-01T00:00:00.000Z')`)
	mustExec(t, conn, `UPDATE touba.meta SET value = '0013_pgspeed_event_key.sql' WHERE key = $1`, schemacompat.KeyOldest)
	st, err = Open(ctx, Config{URL: url, NodeID: "n"})
	if err != nil {
		t.Fatalf("open on the next release's schema: %v", err)
	}
	if st.SchemaVersion != "0042_next.sql" {
		t.Errorf("schema version %q, want 0042_next.sql", st.SchemaVersion)
	}
	st.Close()
	if level, _ := meta(); level != "0013_pgspeed_event_key.sql" {
		t.Errorf("level %q after this binary's open, want 0013_pgspeed_event_key.sql kept", level)
	}

	// Release N+2 declared itself incompatible with binaries before 0042.
	mustExec(t, conn, `UPDATE touba.meta SET value = CASE key WHEN $1 THEN '0042_contract_x.sql' ELSE '0043_y.sql' END
		WHERE key IN ($1, $2)`, schemacompat.KeyOldest, schemacompat.KeySetBy)
	before := schemaShape(t, conn)
	_, err = Open(ctx, Config{URL: url, NodeID: "n"})
	if got := touba.ErrorCode(err); got != touba.ESchemaTooNew {
		t.Fatalf("open on a schema needing 0042: %v (code %s), want %s", err, got, touba.ESchemaTooNew)
	}
	for _, want := range []string{"0042_contract_x or later", "0043_y", "knows up to 0024_effect_settled"} {
		if !strings.Contains(touba.ErrorMessage(err), want) {
			t.Errorf("refusal %q does not say %q", touba.ErrorMessage(err), want)
		}
	}
	if after := schemaShape(t, conn); after != before {
		t.Errorf("the refused open changed the schema:\n%s\nwas:\n%s", after, before)
	}
}
