package main_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/postgres"
)

// SPEC §8 "Rolling upgrades": a node started on a database whose schema a
// newer release declared incompatible with it refuses start-up,
// SchemaTooNew, exit 2, naming both versions.
func TestServeRefusesSchemaTooNewDatabase(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.New(t)
	st, err := postgres.Open(ctx, postgres.Config{URL: dsn, NodeID: "first"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `UPDATE touba.meta SET value = CASE key WHEN 'oldest_compatible' THEN '0042_contract.sql' ELSE '0043_next.sql' END
		WHERE key IN ('oldest_compatible', 'oldest_compatible_set_by')`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := newOpEnv(t, opProgram, opManifest)
	code, stderr := serveDB(t, e, dsn)
	out := strings.TrimRight(stderr, "\n")
	line := out[strings.LastIndex(out, "\n")+1:]
	if code != 2 || !strings.HasPrefix(line, "SchemaTooNew: ") {
		t.Fatalf("serve on a schema needing 0042: exit %d, last line %q; want 2 and SchemaTooNew\n%s", code, line, stderr)
	}
	for _, want := range []string{"0042_contract or later", "0043_next", "knows up to 0024_effect_settled"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal %q does not say %q", line, want)
		}
	}
}
