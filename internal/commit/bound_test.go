package commit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/commit"
)

// Options.Timeout bounds a batch whose database stopped answering; a
// TryShared caller gives up at its own deadline; an operation whose
// caller's context ended while it waited is not run.
func TestBoundedWaits(t *testing.T) {
	w := commit.New[*memTx](&memBackend{}, commit.Options{Timeout: 200 * time.Millisecond})
	defer w.Close()
	stuck := func(ctx context.Context, tx *memTx) error { <-ctx.Done(); return ctx.Err() }

	start := time.Now()
	if err := w.Do(context.Background(), stuck); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("a stuck batch: %v after %s; want the batch's deadline", err, time.Since(start))
	}

	// A batch stuck until its deadline; meanwhile a caller with a shorter
	// deadline gives up, and one whose context ends before it is taken
	// is never run.
	taken := make(chan struct{})
	go w.Do(context.Background(), func(ctx context.Context, tx *memTx) error { close(taken); return stuck(ctx, tx) })
	<-taken
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	start = time.Now()
	err := w.TryShared(ctx, func(context.Context, *memTx) error { ran = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 150*time.Millisecond {
		t.Fatalf("TryShared behind a stuck batch: %v after %s; want its own deadline (50ms)", err, time.Since(start))
	}
	// The op is answered once the writer reaches it: dropped, not run.
	if err := w.Do(context.Background(), write(1, false)); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Fatal("an operation whose caller's context had ended was run")
	}
}
