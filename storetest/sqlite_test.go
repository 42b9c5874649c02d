package storetest_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/sqlite"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/storetest"
)

// TestSQLite runs the conformance suite against the three SQLite files.
func TestSQLite(t *testing.T) { storetest.Run(t, sqliteFactory{}) }

// sqliteFactory opens queue, state and journal files in a test's temporary
// folder.
type sqliteFactory struct{}

// sqliteFiles is what a factory opened, for Reopen and OpenAgain.
type sqliteFiles struct {
	dir  string
	opts storetest.Options
	q    *queue.Queue
	s    *state.State
	j    *journal.Journal
}

func (sqliteFactory) Open(t *testing.T, o storetest.Options) storetest.Stores {
	return openFiles(t, t.TempDir(), o)
}

func (sqliteFactory) Reopen(t *testing.T, old storetest.Stores) storetest.Stores {
	t.Helper()
	f := old.Private.(*sqliteFiles)
	for name, err := range map[string]error{"queue": f.q.Close(), "state": f.s.Close(), "journal": f.j.Close()} {
		if err != nil {
			t.Fatalf("close %s: %v", name, err)
		}
	}
	return openFiles(t, f.dir, f.opts)
}

func (sqliteFactory) OpenAgain(t *testing.T, old storetest.Stores) storetest.Stores {
	f := old.Private.(*sqliteFiles)
	return openFiles(t, f.dir, f.opts)
}

// openFiles opens the three files in dir as the daemon does, and closes
// them at the end of the test.
func openFiles(t *testing.T, dir string, o storetest.Options) storetest.Stores {
	t.Helper()
	ctx := context.Background()
	var secrets secret.Set
	for _, s := range o.Secrets {
		secrets.Add(s)
	}
	j, err := journal.Open(ctx, filepath.Join(dir, "touba.effect-journal.sqlite"), journal.Options{Now: o.Now, Secrets: &secrets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	q, err := queue.Open(ctx, filepath.Join(dir, "touba.trigger-queue.sqlite"), queue.Options{Now: o.Now, MaxPending: o.MaxPending})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	s, err := state.Open(ctx, filepath.Join(dir, "touba.triggers.sqlite"), state.Options{Now: o.Now,
		LogMaxRows: o.LogMaxRows, LogMaxAge: o.LogMaxAge})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return storetest.Stores{Queue: q, State: s, Journal: j, PruneLog: s.Prune,
		History: &sqlite.History{Queue: q, State: s, Journal: j, Batch: 2},
		Private: &sqliteFiles{dir: dir, opts: o, q: q, s: s, j: j}}
}
