package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// A finish refused by its guard (a lost lease) runs without a savepoint:
// it must fail only its caller, write nothing, and leave the finishes of
// its batch committed.
func TestRefusedFinishFailsOnlyItself(t *testing.T) {
	ctx := context.Background()
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{})
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = enqueue(t, q, fmt.Sprintf("e%d", i), "{}").QueueID
	}
	if got, err := q.Lease(ctx, n); err != nil || len(got) != n {
		t.Fatalf("lease: %d, %v", len(got), err)
	}
	tokens := make([]int64, n)
	for i, id := range ids {
		tokens[i] = leaseToken(t, q, id)
	}
	// A blocker holds the writer until every finish waits, so that they
	// share one batch.
	entered, release := make(chan struct{}), make(chan struct{})
	go q.SubmitOp(func(context.Context, *sqlitex.Tx) (int64, error) { close(entered); <-release; return 0, nil })
	<-entered
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token := tokens[i]
			if i%2 == 1 {
				token++ // not the holder's: refused
			}
			errs[i] = q.Finish(ctx, ids[i], token, touba.StatusDone, "", "")
		}()
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return q.WriterPending() >= n+1 }, "finishes queued")
	close(release)
	wg.Wait()
	for i, id := range ids {
		d, err := q.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if touba.ErrorCode(errs[i]) != touba.ELeaseLost || d.Status != touba.StatusRunning {
				t.Errorf("refused finish %d: %v, status %s; want LeaseLost and still running", i, errs[i], d.Status)
			}
		} else if errs[i] != nil || d.Status != touba.StatusDone {
			t.Errorf("finish %d batched with refused ones: %v, status %s; want done", i, errs[i], d.Status)
		}
	}
}
