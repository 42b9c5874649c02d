package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite"
)

// startupJournal builds, in dir, files whose journal holds total effects,
// dispatched of them left dispatched by a process that is gone (the rest
// applied), with two events each, as after a crash under load.
func startupJournal(tb testing.TB, dir string, total, dispatched int) sqlite.Config {
	tb.Helper()
	ctx := context.Background()
	c := sqlite.Config{Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"),
		Journal: filepath.Join(dir, "j.sqlite"), RequeueRunning: true}
	s, err := sqlite.Open(ctx, c)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	db, err := sql.Open("sqlite3", "file:"+c.Journal+"?_journal_mode=WAL")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		tb.Fatal(err)
	}
	now := touba.FormatTime(time.Now())
	for i := range total {
		state, owner, result := "applied", any(nil), any(`{"ok":true}`)
		if i%(total/dispatched) == 0 {
			state, owner, result = "dispatched", "gone-process", nil
		}
		scope, id := fmt.Sprintf("q%07d", i), fmt.Sprintf("q%07d:step", i)
		if _, err := tx.Exec(`INSERT INTO effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state,
			attempts, call_id, receipt_ref, result, created_at, updated_at, owner)
			VALUES (?, ?, 'tool:b/W', 'invoke', 'sha256:ab', 'idempotency_key', ?, 1, ?, 'R', ?, ?, ?, ?)`,
			scope, id, state, "c"+scope, result, now, now, owner); err != nil {
			tb.Fatal(err)
		}
		for _, st := range []string{"prepared", state} {
			if _, err := tx.Exec(`INSERT INTO effect_events (scope, effect_id, call_id, state, at, detail) VALUES (?, ?, ?, ?, ?, '')`,
				scope, id, "c"+scope, st, now); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkStartupRecovery times sqlite.Open (lock, journal open and
// recovery, queue and requeue, state) on a journal of 100,000 effects with
// 1,000 dispatched (issue 17: under 1 s). Each iteration rebuilds the files,
// outside the timer, since recovery changes them.
// scripts/bench-startup runs it.
func BenchmarkStartupRecovery(b *testing.B) {
	for range b.N {
		b.StopTimer()
		c := startupJournal(b, b.TempDir(), 100_000, 1_000)
		b.StartTimer()
		s, err := sqlite.Open(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if len(s.Recovered) != 1_000 {
			b.Fatalf("recovered %d effects, want 1000", len(s.Recovered))
		}
		s.Close()
		b.StartTimer()
	}
}
