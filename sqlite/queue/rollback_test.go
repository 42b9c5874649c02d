package queue_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestOpThatLosesTheTransaction: when a state change in a batch makes
// SQLite roll the whole transaction back (as SQLITE_FULL does), the
// enqueues of that batch must neither be answered 202 nor be on disk.
func TestOpThatLosesTheTransaction(t *testing.T) {
	q := mustOpen(t, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make(chan error, 64)
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		results <- q.SubmitOp(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
			tx.ExecContext(ctx, `ROLLBACK`)
			return 0, errors.New("disk full")
		})
	}()
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			_, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("e%d", i), Digest: "d"})
			results <- err
		}(i)
	}
	close(start)
	wg.Wait()
	close(results)
	failed := 0
	for err := range results {
		if err != nil {
			failed++
		}
	}
	entries, err := q.List(ctx, touba.EntryFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Enqueues that shared the lost batch failed; every one that succeeded
	// is on disk, and nothing that failed is.
	if got, want := len(entries), 33-failed; got != want {
		t.Fatalf("%d entries on disk, %d calls failed of 33: a failed enqueue was stored or a success lost", got, failed)
	}
}
