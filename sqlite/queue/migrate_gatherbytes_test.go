package queue_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestMigrateGatherBytes opens a queue file the previous release wrote
// (the migrations before 0011, no bytes column) with an open gathering of
// two deliveries: 0011 adds bytes as NULL, and the next merge sums the
// gathering's bodies once, then keeps the count in bytes. started_at stays
// NULL while the gathering is open, as the previous release reads it.
func TestMigrateGatherBytes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	db := testkit.OldFile(t, path, "schema", "0011")
	key := touba.GatherKeyOf(touba.GatherDebounce, "/event/body/p")
	for _, stmt := range []string{
		`INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status, updated_at)
			VALUES ('c1', 'trigger:g', 'e1', 'd', X'0102030405', '{}', '', '2026-12-01T10:00:00.000Z', 'waiting', '2026-12-01T10:00:00.000Z')`,
		`INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status, updated_at,
			merged_into, merged_seq)
			VALUES ('m2', 'trigger:g', 'e2', 'd', X'010203', '{}', '', '2026-12-01T10:00:00.000Z', 'merged', '2026-12-01T10:00:00.000Z', 'c1', 2)`,
		`INSERT INTO gatherings (carrier, trigger_ref, kind, key, value, state, size, opened_at, last_at, wake_at, deadline)
			VALUES ('c1', 'trigger:g', 'debounce', '` + key + `', '"k"', 'open', 2, '2026-12-01T10:00:00.000Z',
			'2026-12-01T10:00:00.000Z', '2026-12-01T10:00:05.000Z', '2026-12-01T10:00:12.000Z')`,
	} {
		if _, err := db.Write.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 10, 0, 1, 0, time.UTC)
	q, err := queue.Open(ctx, path, queue.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	read := func() (bytes sql.NullInt64, started sql.NullString) {
		t.Helper()
		if err := q.SubmitOp(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
			return 0, tx.QueryRowContext(ctx, `SELECT bytes, started_at FROM gatherings WHERE carrier = 'c1'`).Scan(&bytes, &started)
		}); err != nil {
			t.Fatal(err)
		}
		return bytes, started
	}
	if b, s := read(); b.Valid || s.Valid {
		t.Fatalf("after 0011: bytes %v, started_at %v; want both NULL", b, s)
	}
	put := func(id string, body string) {
		t.Helper()
		d := &touba.Delivery{TriggerRef: "trigger:g", EventID: id, Digest: "d" + id, Body: []byte(body),
			Headers: map[string]string{}, RemoteAddr: "192.0.2.1:1",
			Gather: &touba.GatherSpec{Kind: touba.GatherDebounce, Key: key, Value: `"k"`, Window: 5 * time.Second,
				MaxWait: 12 * time.Second}}
		r, err := q.Enqueue(ctx, d)
		if err != nil || r.Gather != touba.GatherMerged || r.Carrier != "c1" {
			t.Fatalf("enqueue %s: %+v, %v; want merged into c1", id, r, err)
		}
	}
	put("e3", "{}")
	if b, s := read(); b.Int64 != 5+3+2 || !b.Valid || s.Valid {
		t.Fatalf("after a merge: bytes %v, started_at %v; want 10 (summed once) and NULL", b, s)
	}
	put("e4", "{\"a\":1}")
	if b, s := read(); b.Int64 != 10+7 || !b.Valid || s.Valid {
		t.Fatalf("after a second merge: bytes %v, started_at %v; want 17 and NULL", b, s)
	}
}
