package queue_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestMigrateWaitsKeepsEntries opens a queue file made by the migrations
// before 0006 (which rebuilds entries to admit waiting and cancelled) and
// checks that every entry, with every column a run reads, is still there,
// that every index of the earlier migrations was made again, and that the
// new states are admitted.
func TestMigrateWaitsKeepsEntries(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	db := testkit.OldFile(t, path, "schema", "0006")
	for _, row := range []string{
		`('q1', 'trigger:t', 'e1', 'd1', X'7b7d', '{"a":"b"}', 'r', '2026-01-01T00:00:00.000Z', 'done', 1, NULL, NULL, NULL,
		  '2026-01-01T00:00:01.000Z', NULL, 0, 0, 'tp', 1, 1)`,
		`('q2', 'trigger:t', 'e2', 'd2', X'7b7d', '{}', 'r', '2026-01-01T00:00:00.000Z', 'running', 1, NULL, NULL, NULL,
		  '2026-01-01T00:00:01.000Z', '"k"', 1, 0, '', 3, 1)`,
		`('q3', 'trigger:t', 'e3', 'd3', X'7b7d', '{}', 'r', '2026-01-01T00:00:00.000Z', 'pending', 0, NULL, NULL, NULL,
		  '2026-01-01T00:00:01.000Z', '"k"', 1, 1, '', 0, 1)`,
		`('q4', 'trigger:t', 'e4', 'd4', NULL, '{}', 'r', '2026-01-01T00:00:00.000Z', 'failed', 2, '2026-01-02T00:00:00.000Z',
		  'HandlerFailed', 'boom', '2026-01-01T00:00:01.000Z', NULL, 0, 0, '', 2, 1)`,
	} {
		if _, err := db.Write.ExecContext(ctx, `INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers,
			remote_addr, received_at, status, attempts, not_before, error_code, error_message, updated_at, conc_key, conc_max,
			held, traceparent, lease_token, first_token) VALUES `+row); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	q := mustOpen(t, path, queue.Options{})
	if q.Pending() != 1 {
		t.Fatalf("pending %d after the migration, want 1", q.Pending())
	}
	want := map[string]string{"q1": "done", "q2": "running", "q3": "pending", "q4": "failed"}
	for id, st := range want {
		d, err := q.Get(ctx, id)
		if err != nil || d == nil || d.Status != st {
			t.Fatalf("%s after the migration: %+v, %v; want %s", id, d, err, st)
		}
	}
	q1, _ := q.Get(ctx, "q1")
	if q1.Headers["a"] != "b" || string(q1.Body) != "{}" || q1.TraceParent != "tp" || !q1.FirstLease || q1.WakeAt != nil || q1.ProgramDigest != "" {
		t.Fatalf("q1 after the migration: %+v", q1)
	}
	q2, _ := q.Get(ctx, "q2")
	if q2.ConcKey != `"k"` || q2.ConcMax != 1 || q2.LeaseToken != 3 || q2.FirstLease {
		t.Fatalf("q2 after the migration: %+v", q2)
	}
	if d, _ := q.Detail(ctx, "q4"); d == nil || d.ErrorMessage != "boom" || d.NotBefore == nil || d.BodyBytes != -1 {
		t.Fatalf("q4's detail after the migration: %+v", d)
	}
	q.Close()

	// Every index of the earlier migrations is there again.
	db, err := sqlitex.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, ix := range []string{"entries_identity", "entries_status", "entries_key", "entries_ready",
		"entries_trigger_list", "entries_ready_trigger", "entries_wake"} {
		var n int
		if err := db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'entries' AND name = ?`, ix).Scan(&n); err != nil || n != 1 {
			t.Fatalf("index %s after the migration: %d, %v", ix, n, err)
		}
	}
	db.Close()

	// The identity still refuses a second entry, and the new states are
	// admitted: the running keyed entry waits, and q3 stays held behind it.
	q = mustOpen(t, path, queue.Options{})
	if r := enqueue(t, q, "e1", "{}"); r.Created || r.QueueID != "q1" {
		t.Fatalf("redelivery of e1 after the migration: %+v", r)
	}
	at := time.Now().Add(time.Hour)
	if w, err := q.BeginWait(ctx, 3, touba.Wait{QueueID: "q2", StepID: "s", Kind: touba.WaitSleep, WakeAt: &at}); err != nil || w.State != touba.WaitOpen {
		t.Fatalf("begin wait after the migration: %+v, %v", w, err)
	}
	if got, err := q.Lease(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("lease while the keyed entry waits: %+v, %v; want none (q3 held)", got, err)
	}
}
