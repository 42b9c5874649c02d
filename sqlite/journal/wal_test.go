package journal_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/touba/touba-trigger/sqlite/journal"
)

// A steady stream of commits must not grow the WAL without bound: the
// background checkpoint alone never catches up with a busy writer.
func TestWALStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2500 commits")
	}
	const commits = 2500 // well past sqlitex's automatic checkpoint at 4096 pages (16 MiB)
	ctx := context.Background()
	path := journalPath(t)
	j := mustOpen(t, path, journal.Options{})
	for i := range commits {
		if _, err := j.Prepare(ctx, prep("q", fmt.Sprintf("q:%d", i), "c")); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wal %d bytes after %d commits", fi.Size(), commits)
	if got, limit := fi.Size(), int64(24<<20); got > limit {
		t.Fatalf("wal=%d bytes after %d commits, want at most %d", got, commits, limit)
	}
}
