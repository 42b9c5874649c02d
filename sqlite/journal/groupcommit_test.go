package journal_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// holdWriteLock takes the file's write lock from another connection, so the
// journal's writer blocks in BEGIN and transitions pile up behind it. The
// returned function releases it.
func holdWriteLock(tb testing.TB, path string) func() {
	tb.Helper()
	db, err := sqlitex.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tx, err := db.Write.Begin() // BEGIN IMMEDIATE: the write lock
	if err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			tx.Rollback()
			db.Close()
		})
	}
	tb.Cleanup(release)
	return release
}

// waitPending waits until n transitions wait for their commit.
func waitPending(tb testing.TB, j *journal.Journal, n int64) {
	tb.Helper()
	testkit.WaitFor(tb, 5*time.Second, func() bool { return j.Stats().Pending >= n },
		fmt.Sprintf("%d transitions pending", n))
}

func TestGroupCommit(t *testing.T) {
	const n = 200
	ctx := context.Background()
	path := journalPath(t)
	j := mustOpen(t, path, journal.Options{})
	base := j.Stats()

	release := holdWriteLock(t, path)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = j.Prepare(ctx, prep("q", fmt.Sprintf("q:%d", i), fmt.Sprintf("c%d", i)))
		}()
	}
	// The writer took the first few and waits for the lock; the rest queue.
	waitPending(t, j, n)
	release()
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Fatalf("prepare %d: %v", i, err)
		}
	}
	st := j.Stats()
	if got, want := st.Transitions-base.Transitions, uint64(n); got != want {
		t.Fatalf("transitions=%d, want %d", got, want)
	}
	if got := st.Commits - base.Commits; got >= n || got > 2 {
		t.Fatalf("commits=%d for %d transitions, want 2 (one stuck, then one batch)", got, n)
	}
	if got, err := j.List(ctx, touba.EffectFilter{State: touba.EffectPrepared}); err != nil || len(got) != n {
		t.Fatalf("stored %d prepared (%v), want %d", len(got), err, n)
	}
}

// One failing transition in a batch fails only its own caller.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	ctx := context.Background()
	path := journalPath(t)
	j := mustOpen(t, path, journal.Options{})
	bringTo(t, j, touba.EffectApplied, touba.RetryNone)

	release := holdWriteLock(t, path)
	type call struct {
		name    string
		do      func() error
		wantErr string
	}
	calls := []call{
		{"finish applied again", func() error {
			return j.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1", State: touba.EffectNotApplied})
		}, "ErrTransition"},
		{"resolve applied", func() error { return j.Resolve(ctx, "q", "q:step", journal.NotApplied()) }, touba.EEffectNotUnknown},
		{"dispatch missing", func() error { return j.Dispatch(ctx, "q", "q:missing", "c9") }, touba.EINTERNAL},
	}
	for i := range 10 {
		calls = append(calls, call{fmt.Sprintf("prepare %d", i), func() error {
			_, err := j.Prepare(ctx, prep("q", fmt.Sprintf("q:ok%d", i), "c"))
			return err
		}, ""})
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.do() }()
	}
	waitPending(t, j, int64(len(calls)))
	base := j.Stats()
	release()
	wg.Wait()
	for i, c := range calls {
		if got, want := errorIs(errs[i]), c.wantErr; got != want {
			t.Errorf("%s: error %q (%v), want %q", c.name, got, errs[i], want)
		}
	}
	if got := j.Stats().Commits - base.Commits; got > 2 {
		t.Fatalf("commits=%d, want at most 2", got)
	}
	if got, want := mustGet(t, j, "q", "q:step").State, touba.EffectApplied; got != want {
		t.Fatalf("state=%s, want %s", got, want)
	}
}
