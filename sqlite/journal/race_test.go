package journal_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// racePrepare runs one Prepare of the same identity per call, all released
// at once, spread over the given handles, and returns the errors.
func racePrepare(t *testing.T, handles []*journal.Journal, calls int) []error {
	t.Helper()
	start := make(chan struct{})
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = handles[i%len(handles)].Prepare(context.Background(), prep("q", "q:step", fmt.Sprintf("call-%d", i)))
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// winners checks that every loser got EffectInProgress and returns the
// indexes of the callers that won.
func winners(t *testing.T, errs []error) []int {
	t.Helper()
	var won []int
	for i, err := range errs {
		if err == nil {
			won = append(won, i)
		} else if got, want := touba.ErrorCode(err), touba.EEffectInProgress; got != want {
			t.Errorf("caller %d: code=%s (%v), want %s", i, got, err, want)
		}
	}
	return won
}

func TestPrepareRaceInProcess(t *testing.T) {
	j := mustOpen(t, journalPath(t), journal.Options{})
	if got, want := len(winners(t, racePrepare(t, []*journal.Journal{j}, 50))), 1; got != want {
		t.Fatalf("winners=%d, want %d", got, want)
	}
	if got, want := mustGet(t, j, "q", "q:step").Attempts, 1; got != want {
		t.Fatalf("attempts=%d, want %d", got, want)
	}
}

// Two handles on one file (what the lock forbids, simulated here) share no
// memory: only the file's compare-and-swap keeps both from winning, both for
// a new row and for a new attempt of a released one.
func TestPrepareRaceOnDisk(t *testing.T) {
	ctx := context.Background()
	path := journalPath(t)
	a := mustOpen(t, path, journal.Options{})
	b := mustOpen(t, path, journal.Options{})
	handles := []*journal.Journal{a, b}
	won := winners(t, racePrepare(t, handles, 50))
	if got, want := len(won), 1; got != want {
		t.Fatalf("new row: winners=%d, want %d", got, want)
	}
	// Only the winner's handle and call may finish it.
	winner, loser := handles[won[0]%2], handles[(won[0]+1)%2]
	o := touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: fmt.Sprintf("call-%d", won[0]), State: touba.EffectNotApplied}
	if got, want := touba.ErrorCode(loser.Finish(ctx, o)), touba.EEffectInProgress; got != want {
		t.Fatalf("finish by the other handle: code=%s, want %s", got, want)
	}
	if err := winner.Finish(ctx, o); err != nil {
		t.Fatalf("finish by the winner: %v", err)
	}
	if got, want := len(winners(t, racePrepare(t, handles, 50))), 1; got != want {
		t.Fatalf("new attempt: winners=%d, want %d", got, want)
	}
	if got, want := mustGet(t, a, "q", "q:step").Attempts, 2; got != want {
		t.Fatalf("attempts=%d, want %d", got, want)
	}
}

// A handle that closes while it holds a prepared effect releases it, so the
// next handle may try again; a dispatched one becomes unknown.
func TestCloseReleasesHeldEffects(t *testing.T) {
	ctx := context.Background()
	path := journalPath(t)
	a, err := journal.Open(ctx, path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Prepare(ctx, prep("q", "q:prepared", "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Prepare(ctx, prep("q", "q:dispatched", "c2")); err != nil {
		t.Fatal(err)
	}
	if err := a.Dispatch(ctx, "q", "q:dispatched", "c2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	err = a.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:dispatched", CallID: "c2", State: touba.EffectApplied})
	if err != journal.ErrClosed {
		t.Fatalf("finish after close: %v, want ErrClosed", err)
	}

	b := mustOpen(t, path, journal.Options{})
	e := mustGet(t, b, "q", "q:dispatched")
	if got, want := e.State, touba.EffectUnknown; got != want {
		t.Fatalf("dispatched at close: state=%s, want %s", got, want)
	}
	if e, err := b.Prepare(ctx, prep("q", "q:prepared", "c3")); err != nil {
		t.Fatalf("prepare after close released it: %v", err)
	} else if got, want := e.Attempts, 2; got != want {
		t.Fatalf("attempts=%d, want %d", got, want)
	}
}
