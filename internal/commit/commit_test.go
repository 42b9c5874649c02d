package commit_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/testkit"
)

// memTx records what its batch wrote; memBackend commits it into a log,
// or fails the commit when told. The engine's rules are about batches and
// answers, not storage: the SQLite backend has its own test (sqlitex).
type memTx struct {
	writes []int
	// deferOK and deferred: deferringBackend's optimistic runs.
	deferOK  bool
	deferred []int
}

type memBackend struct {
	mu        sync.Mutex
	failAt    int // the number of the commit that fails; 0 for none
	committed []int
	batches   int
}

func (b *memBackend) Batch(_ context.Context, fn func(*memTx) error) error {
	tx := &memTx{}
	if err := fn(tx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches++
	if b.batches == b.failAt {
		return errors.New("disk full")
	}
	b.committed = append(b.committed, tx.writes...)
	return nil
}
func (b *memBackend) Isolate(_ context.Context, tx *memTx, fn func() error) (error, error) {
	n := len(tx.writes)
	if err := fn(); err != nil {
		tx.writes = tx.writes[:n]
		return err, nil
	}
	return nil, nil
}

func write(v int, fail bool) commit.Op[*memTx] {
	return func(_ context.Context, tx *memTx) error {
		tx.writes = append(tx.writes, v)
		if fail {
			return errors.New("refused")
		}
		return nil
	}
}

// A failed commit fails every operation of its batch, even those whose
// own work succeeded: none of them may be reported done.
func TestFailedCommitFailsTheWholeBatch(t *testing.T) {
	// The first op holds the writer in batch 1 until the ten others are
	// queued, so they form batch 2, whose commit fails.
	b := &memBackend{failAt: 2}
	entered, release := make(chan struct{}), make(chan struct{})
	w := commit.New[*memTx](b, commit.Options{MaxBatch: 64, Queue: 64})
	defer w.Close()
	w.Go(func(context.Context, *memTx) error { close(entered); <-release; return nil }, nil)
	<-entered
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.Do(context.Background(), write(i, false)) }()
	}
	released := false
	defer func() { // on a failed wait too: the blocked op must end
		if !released {
			close(release)
		}
	}()
	// the blocker and the ten
	testkit.WaitFor(t, 10*time.Second, func() bool { return w.Stats().Pending >= 11 }, "11 ops queued")
	close(release)
	released = true
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Fatalf("op %d reported done in a batch whose commit failed", i)
		}
	}
	if len(b.committed) != 0 {
		t.Fatalf("committed=%v, want nothing", b.committed)
	}
}

// An isolated op's error undoes only itself; a shared op's error fails the
// batch.
func TestIsolatedAndSharedErrors(t *testing.T) {
	b := &memBackend{}
	w := commit.New[*memTx](b, commit.Options{})
	defer w.Close()
	ctx := context.Background()
	if err := w.Do(ctx, write(1, true)); err == nil {
		t.Fatal("isolated op's own error was not returned")
	}
	if err := w.Do(ctx, write(2, false)); err != nil {
		t.Fatal(err)
	}
	if err := w.DoShared(ctx, write(3, true)); err == nil {
		t.Fatal("shared op's error was not returned")
	}
	if got := b.committed; len(got) != 1 || got[0] != 2 {
		t.Fatalf("committed=%v, want [2]", got)
	}
	if st := w.Stats(); st.Ops != 1 || st.Failed != 2 || st.Pending != 0 {
		t.Fatalf("stats=%+v", st)
	}
}

// Go keeps submission order with later Do calls, and Close drains what was
// submitted before refusing more.
func TestGoOrderAndClose(t *testing.T) {
	b := &memBackend{}
	w := commit.New[*memTx](b, commit.Options{})
	for i := range 5 {
		w.Go(write(i, false), nil)
	}
	if err := w.Do(context.Background(), write(5, false)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for i, v := range b.committed {
		if v != i {
			t.Fatalf("committed=%v: out of order", b.committed)
		}
	}
	if err := w.Do(context.Background(), write(9, false)); !errors.Is(err, commit.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
	var got error
	w.Go(write(9, false), func(err error) { got = err })
	if !errors.Is(got, commit.ErrClosed) {
		t.Fatalf("Go after Close reported %v", got)
	}
}

// A shared op's Refused error is its own: it fails only its caller, the
// ops batched with it commit, and it wrote nothing. A plain error of a
// shared op still fails its whole batch.
func TestSharedRefusedFailsOnlyItself(t *testing.T) {
	b := &memBackend{}
	w := commit.New[*memTx](b, commit.Options{MaxBatch: 64, Queue: 64})
	defer w.Close()
	ctx := context.Background()
	errGuard := errors.New("guard matched no row")
	// batch holds the blocker and the three ops submitted while it waits.
	batch := func(ops ...commit.Op[*memTx]) []error {
		entered, release := make(chan struct{}), make(chan struct{})
		before := w.Stats().Commits
		w.Go(func(context.Context, *memTx) error { close(entered); <-release; return nil }, nil)
		<-entered
		errs := make([]error, len(ops))
		var wg sync.WaitGroup
		for i, o := range ops {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = w.DoShared(ctx, o) }()
		}
		testkit.WaitFor(t, 10*time.Second, func() bool { return w.Stats().Pending >= int64(len(ops)+1) }, "ops queued")
		close(release)
		wg.Wait()
		if got := w.Stats().Commits - before; got > 2 {
			t.Fatalf("%d commits, want the ops in the blocker's batch or the next one", got)
		}
		return errs
	}
	refused := func(_ context.Context, _ *memTx) error { return commit.Refused(errGuard) }
	errs := batch(write(1, false), refused, write(2, false))
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("ops batched with a refused one failed: %v", errs)
	}
	if !errors.Is(errs[1], errGuard) || errs[1].Error() != errGuard.Error() {
		t.Fatalf("refused op returned %v, want %v", errs[1], errGuard)
	}
	if got := b.committed; len(got) != 2 || got[0]+got[1] != 3 {
		t.Fatalf("committed=%v, want 1 and 2", got)
	}
	// A plain error: the whole batch fails, nothing of it commits.
	errs = batch(write(3, false), write(4, true), write(5, false))
	for i, err := range errs {
		if err == nil {
			t.Fatalf("op %d reported done in a batch a plain error failed", i)
		}
	}
	if got := b.committed; len(got) != 2 {
		t.Fatalf("committed=%v, want still [1 2]", got)
	}
	// GoShared reports a refusal to onErr and lets a later Do commit.
	var got error
	var mu sync.Mutex
	w.GoShared(refused, func(err error) { mu.Lock(); got = err; mu.Unlock() })
	if err := w.Do(ctx, write(6, false)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(got, errGuard) {
		t.Fatalf("GoShared refusal reported %v", got)
	}
}

// Callers answered by one commit must be able to join the next one: a
// writer that gathered at once after answering would find only the first
// of them queued (the others woken but not run yet) and commit it alone:
// one fsync for one op. On one P the order is fixed: without the writer's
// yield every op below took a commit of its own (1,600 for 1,600).
func TestWokenCallersJoinTheNextBatch(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	b := &memBackend{}
	w := commit.New[*memTx](b, commit.Options{MaxBatch: 64, Queue: 64})
	defer w.Close()
	const callers, rounds = 32, 50
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := w.Do(context.Background(), write(i, false)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	commits := w.Stats().Commits
	t.Logf("%d ops in %d commits", callers*rounds, commits)
	if commits > rounds*5/4 {
		t.Fatalf("%d ops took %d commits: callers answered by a commit did not join the next one (want at most %d)",
			callers*rounds, commits, rounds*5/4)
	}
}

// An optimistic batch of redo-safe operations runs without isolating
// them; one failure rolls it back whole and runs it again isolated, so
// the outcome is the isolated batch's: only the failed one is undone, and
// a Refused one (which wrote nothing) makes no second run.
func TestOptimisticBatchRunsAgainIsolatedOnAFailure(t *testing.T) {
	b := &countingBackend{}
	w := commit.New[*memTx](b, commit.Options{MaxBatch: 64, Queue: 64, Optimistic: true})
	defer w.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	w.GoRedo(func(context.Context, *memTx) error { close(entered); <-release; return nil }, nil)
	<-entered
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i {
			case 2:
				errs[i] = w.DoRedo(context.Background(), write(i, true))
			case 4:
				errs[i] = w.DoRedo(context.Background(), func(context.Context, *memTx) error { return commit.Refused(errors.New("no")) })
			default:
				errs[i] = w.DoRedo(context.Background(), write(i, false))
			}
		}()
	}
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	testkit.WaitFor(t, 5*time.Second, func() bool { return w.Stats().Pending >= 7 }, "the six operations behind the held batch")
	releaseOnce()
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 2 || i == 4) {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if got := w.Stats().Redos; got != 1 {
		t.Fatalf("redos %d, want 1 (the batch with the failure, once)", got)
	}
	if b.isolated == 0 {
		t.Fatal("the second run isolated nothing")
	}
	if len(b.committed) != 4 {
		t.Fatalf("committed %v, want the 4 writes that did not fail", b.committed)
	}

	// A batch of redo-safe operations that all succeed isolates none.
	b.isolated = 0
	if err := w.DoRedo(context.Background(), write(9, false)); err != nil || b.isolated != 0 {
		t.Fatalf("%v, %d isolated", err, b.isolated)
	}
	// A batch with an operation that is not redo-safe is isolated.
	if err := w.Do(context.Background(), write(10, false)); err != nil || b.isolated != 1 {
		t.Fatalf("%v, %d isolated", err, b.isolated)
	}
}

type countingBackend struct {
	memBackend
	isolated int
}

func (b *countingBackend) Isolate(ctx context.Context, tx *memTx, fn func() error) (error, error) {
	b.isolated++
	return b.memBackend.Isolate(ctx, tx, fn)
}

// deferringBackend runs what optimistic operations deferred at Flush; a
// negative value fails its statement, as a bad row fails a multi-row
// statement for every row in it.
type deferringBackend struct {
	countingBackend
	flushes int
}

func (b *deferringBackend) Optimistic(tx *memTx) { tx.deferOK = true }
func (b *deferringBackend) Flush(_ context.Context, tx *memTx) error {
	b.flushes++
	for _, v := range tx.deferred {
		if v < 0 {
			return errors.New("bad row")
		}
	}
	tx.writes = append(tx.writes, tx.deferred...)
	return nil
}

// deferredWrite defers v in an optimistic run and writes it at once in an
// isolated one, failing there (only itself) when v is negative.
func deferredWrite(v int) commit.Op[*memTx] {
	return func(_ context.Context, tx *memTx) error {
		if tx.deferOK {
			tx.deferred = append(tx.deferred, v)
			return nil
		}
		if v < 0 {
			return errors.New("bad row")
		}
		tx.writes = append(tx.writes, v)
		return nil
	}
}

// An optimistic run lets its operations defer to Flush; a Flush that
// fails makes the batch run again isolated, where nothing is deferred, so
// only the operation whose row was bad fails.
func TestDeferredStatementsFlushOrRunAgainIsolated(t *testing.T) {
	b := &deferringBackend{}
	w := commit.New[*memTx](b, commit.Options{MaxBatch: 64, Queue: 64, Optimistic: true})
	defer w.Close()
	if err := w.DoRedo(context.Background(), deferredWrite(1)); err != nil {
		t.Fatal(err)
	}
	if b.flushes != 1 || b.isolated != 0 || len(b.committed) != 1 {
		t.Fatalf("flushes %d, isolated %d, committed %v: want the write deferred and flushed", b.flushes, b.isolated, b.committed)
	}

	entered, release := make(chan struct{}), make(chan struct{})
	w.GoRedo(func(context.Context, *memTx) error { close(entered); <-release; return nil }, nil)
	<-entered
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := 10 + i
			if i == 3 {
				v = -1
			}
			errs[i] = w.DoRedo(context.Background(), deferredWrite(v))
		}()
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return w.Stats().Pending == 6 }, "the five writes to queue behind the held one")
	close(release)
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 3) {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if got := w.Stats().Redos; got != 1 {
		t.Fatalf("redos %d, want 1", got)
	}
	slices.Sort(b.committed) // the five were submitted in any order
	if want := []int{1, 10, 11, 12, 14}; !slices.Equal(b.committed, want) {
		t.Fatalf("committed %v, want %v", b.committed, want)
	}
}
