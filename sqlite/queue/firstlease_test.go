package queue_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// A new entry's first lease says so (the dispatcher then skips reading its
// checkpoints); an entry from before the first_token column (0) never
// does, since nothing tells whether a run of it started before.
func TestFirstLease(t *testing.T) {
	ctx := context.Background()
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{})
	fresh := enqueue(t, q, "fresh", "1")
	old := enqueue(t, q, "old", "2")
	if err := q.SubmitOp(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `UPDATE entries SET first_token = 0 WHERE queue_id = ?`, old.QueueID)
		return 0, err
	}); err != nil {
		t.Fatal(err)
	}
	got, err := q.Lease(ctx, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("lease: %v, %d entries", err, len(got))
	}
	for _, d := range got {
		if want := d.QueueID == fresh.QueueID; d.FirstLease != want {
			t.Fatalf("%s (token %d): FirstLease %v, want %v", d.EventID, d.LeaseToken, d.FirstLease, want)
		}
	}
}
