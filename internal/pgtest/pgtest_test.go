package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestFreshDatabases: each test's database is its own and empty, and the
// server commits durably (synchronous_commit on).
func TestFreshDatabases(t *testing.T) {
	ctx := context.Background()
	var names [2]string
	for i := range names {
		conn, err := pgx.Connect(ctx, pgtest.New(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&names[i]); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE x (a int)`); err != nil {
			t.Fatalf("database %d not fresh: %v", i, err)
		}
		var sc string
		if err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil || sc != "on" {
			t.Fatalf("synchronous_commit=%q, %v", sc, err)
		}
	}
	if names[0] == names[1] {
		t.Fatalf("both tests got database %s", names[0])
	}
}
