package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// SPEC §8: with a synchronous standby, no delivery answered 202 is lost by
// a failover. A commit whose wait for the standby is cut short (the
// standby stalled past --database-timeout) has committed on the primary
// alone: intake answered 503, and the sender's retry finds the entry. That
// retry's statement inserts nothing, so its commit would not wait for the
// standby either: answered 202 duplicate, the entry was still on the
// primary alone. A batch that answers from an existing entry must commit
// only once the standby has everything before it.
func TestDuplicateWaitsForTheSynchronousStandby(t *testing.T) {
	c := pgtest.Own(t)
	url := c.NewDB(t)
	ctx := context.Background()
	syncTo := func(names string) {
		t.Helper()
		for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '` + names + `'`, `SELECT pg_reload_conf()`} {
			if err := c.Exec(ctx, "postgres", q); err != nil {
				t.Fatal(err)
			}
		}
		// pg_reload_conf only signals the postmaster: wait until it has
		// reloaded (a new session sees the setting).
		waitFor(t, 30*time.Second, func() bool {
			conn, err := pgx.Connect(ctx, c.URL("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			var got string
			err = conn.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&got)
			conn.Close(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return got == names
		}, "synchronous_standby_names to be '"+names+"' after the reload")
	}
	t.Cleanup(func() { syncTo("") }) // before the database is dropped
	st, err := Open(ctx, Config{URL: url, NodeID: "n", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d := func() *touba.Delivery {
		return &touba.Delivery{TriggerRef: "trigger:t", EventID: "e-1", Digest: "d", Body: []byte(`{}`)}
	}
	// A standby that never answers: every commit that waits for it stalls.
	syncTo("ghost")
	// A session applies a reload before its next statement only if the
	// signal came before it started reading that statement: new sessions,
	// which read the setting at their start, leave no window.
	st.Queue.db.pool.Reset()
	if res, err := st.Queue.Enqueue(ctx, d()); err == nil {
		t.Fatalf("enqueue with the standby gone: %+v, want an error (committed on the primary alone)", res)
	}
	res, err := st.Queue.Enqueue(ctx, d())
	if err == nil {
		t.Fatalf("the sender's retry: %+v answered (202 %s) while the entry is on the primary alone; want an error (503)",
			res, res.Status)
	}
}
