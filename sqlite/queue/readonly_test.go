package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestReadOnlyOpen: a queue opened read-only reads what the file holds,
// refuses every change with sqlitex.ErrReadOnly, and leaves the file and
// its WAL as they were; a file missing a migration is refused with
// sqlitex.ErrSchemaBehind (the CLI then opens it under the lock).
func TestReadOnlyOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	q, err := queue.Open(ctx, path, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "e1", Digest: dedupe.Digest([]byte("{}")), Body: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	// The writer stays open beside the reader, as a daemon's would.
	defer q.Close()
	stat := func() map[string]os.FileInfo {
		out := map[string]os.FileInfo{}
		for _, f := range []string{path, path + "-wal"} {
			if fi, err := os.Stat(f); err == nil {
				out[f] = fi
			}
		}
		return out
	}
	before := stat()
	ro, err := queue.Open(ctx, path, queue.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := ro.Get(ctx, r.QueueID); err != nil || d == nil || ro.Pending() != 1 {
		t.Fatalf("read-only get: %v %v, pending %d", d, err, ro.Pending())
	}
	if _, err := ro.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "e2", Digest: "d"}); !errors.Is(err, sqlitex.ErrReadOnly) {
		t.Fatalf("read-only enqueue: %v, want ErrReadOnly", err)
	}
	if _, err := ro.Replay(ctx, []string{r.QueueID}, touba.ReplayOptions{}); !errors.Is(err, sqlitex.ErrReadOnly) {
		t.Fatalf("read-only replay: %v, want ErrReadOnly", err)
	}
	if _, err := ro.Lease(ctx, 1); !errors.Is(err, sqlitex.ErrReadOnly) {
		t.Fatalf("read-only lease: %v, want ErrReadOnly", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	for f, b := range before {
		if a := stat()[f]; a == nil || a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime()) {
			t.Errorf("%s changed: %v -> %v", f, b, a)
		}
	}

	// A migration missing: refused, not migrated.
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM schema_migrations WHERE name = '0004_first_lease.sql'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := queue.Open(ctx, path, queue.Options{ReadOnly: true}); !errors.Is(err, sqlitex.ErrSchemaBehind) {
		t.Fatalf("read-only open of an older schema: %v, want ErrSchemaBehind", err)
	}
}
