package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/touba/touba-trigger/sqlite/queue"
)

// BenchmarkHeldCounts: the reads of held runs on SQLite with n entries
// handed back on a binding: HeldRuns (the dispatcher's recount, every
// 30 s) and CountByTrigger (each /metrics scrape, each console view). They
// read hold_counts (schema/0012_hold_counts.sql), so they cost the same at
// 100,000 held as at 1,000; reading every held entry, they took 130 and
// 180 ms at 100,000 (issue 43).
func BenchmarkHeldCounts(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		ctx := context.Background()
		path := filepath.Join(b.TempDir(), "q.sqlite")
		q, err := queue.Open(ctx, path, queue.Options{MaxPending: 1 << 40})
		if err != nil {
			b.Fatal(err)
		}
		q.Close()
		db, err := sql.Open("sqlite3", path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.Exec(`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
			INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status,
				error_code, updated_at, held, hold_on)
			SELECT printf('00000000-%012d', i), 'trigger:h', 'e' || i, 'd', X'7b7d', '{}', '', '2026-01-01T00:00:00.000Z', 'pending',
				'CircuitOpen', '2026-01-01T00:00:00.000Z', 1, 'tool:x' FROM g`, n); err != nil {
			b.Fatal(err)
		}
		db.Close()
		if q, err = queue.Open(ctx, path, queue.Options{MaxPending: 1 << 40}); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("HeldRuns/%d", n), func(b *testing.B) {
			for range b.N {
				if got, err := q.HeldRuns(ctx); err != nil || got["tool:x"]["trigger:h"] != int64(n) {
					b.Fatalf("held runs %v, %v; want %d", got, err, n)
				}
			}
		})
		b.Run(fmt.Sprintf("CountByTrigger/%d", n), func(b *testing.B) {
			for range b.N {
				if _, err := q.CountByTrigger(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		q.Close()
	}
}
