package postgres

import (
	"context"
	"testing"
	"time"
)

// The daemon's statements run with JIT off: in its sessions (a startup
// parameter), and behind a pooler in each writer's transaction and
// implicit transaction, where a session's setting would not stay.
func TestSessionsRunWithoutJIT(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	pool := st.db.pool
	var jit string
	if err := pool.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil || jit != "off" {
		t.Fatalf("a direct session's jit is %q (%v), want off", jit, err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A pooled server connection: the session's setting is the server's.
	if _, err := conn.Exec(ctx, `SET jit = on`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET jit`) //nolint:errcheck // the connection goes back to a test's pool
	if _, err := conn.Exec(ctx, beginSQL(time.Second, true)); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil || jit != "off" {
		t.Errorf("a pooled writer's transaction runs with jit %q (%v), want off", jit, err)
	}
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	if _, err := tx.Exec(ctx, setLocal(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil || jit != "off" {
		t.Errorf("a pooled implicit transaction runs with jit %q (%v), want off", jit, err)
	}
}
