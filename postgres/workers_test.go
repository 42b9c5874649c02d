package postgres

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
)

// Each node records the worker bindings it has workers of; any node reads
// which bindings some node had a worker of, by the database's clock: a
// record older than the window no longer counts.
func TestWorkersSeen(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	var shift atomic.Int64 // the database's clock as the nodes see it
	open := func(node string) *Store {
		st, err := Open(ctx, Config{URL: url, NodeID: node, ClockOffset: func() time.Duration { return time.Duration(shift.Load()) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, b := open("a"), open("b")
	if err := a.Workers().Seen(ctx, []string{"tool:x/A", "tool:x/Both"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Workers().Seen(ctx, []string{"tool:x/Both"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Workers().Seen(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err := b.Workers().SeenWithin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"tool:x/A": 1, "tool:x/Both": 2}; !maps.Equal(got, want) {
		t.Fatalf("seen %v, want %v", got, want)
	}
	// Two minutes on, B records again; A's records are past the window.
	shift.Store(int64(2 * time.Minute))
	if err := b.Workers().Seen(ctx, []string{"tool:x/Both"}); err != nil {
		t.Fatal(err)
	}
	got, err = a.Workers().SeenWithin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"tool:x/Both": 1}; !maps.Equal(got, want) {
		t.Fatalf("seen two minutes on %v, want %v", got, want)
	}
	// Two hours on, any node's write forgets A's rows (gone node ids
	// leave nothing behind).
	shift.Store(int64(2 * time.Hour))
	if err := b.Workers().Seen(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := b.db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM touba.worker_seen`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d rows kept two hours on, want 0", rows)
	}
	// A row forgotten and written again by one statement.
	if err := a.Workers().Seen(ctx, []string{"tool:x/A"}); err != nil {
		t.Fatal(err)
	}
	shift.Store(int64(4 * time.Hour))
	if err := a.Workers().Seen(ctx, []string{"tool:x/A"}); err != nil {
		t.Fatal(err)
	}
	if got, err = b.Workers().SeenWithin(ctx, time.Minute); err != nil || !maps.Equal(got, map[string]int{"tool:x/A": 1}) {
		t.Fatalf("seen after a write over a forgotten row: %v, %v", got, err)
	}
}
