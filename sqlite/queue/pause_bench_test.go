package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// BenchmarkLeasePastPaused: one lease with 100,000 entries of a paused
// trigger older than the one it can take. Reading through them cost 50 ms
// of the writer per lease; seeking past them (holds.go) about 1 ms, most
// of it the batch's commit.
func BenchmarkLeasePastPaused(b *testing.B) {
	t := b
	ctx := context.Background()
	q, err := queue.Open(ctx, filepath.Join(t.TempDir(), "q.sqlite"), queue.Options{MaxPending: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: "trigger:p", At: time.Now()})
	const n = 100000
	done := make(chan struct{}, 512)
	for i := range n {
		go func() {
			q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:p", EventID: fmt.Sprint(i), Digest: "d", Body: []byte("{}"), Headers: map[string]string{}})
			done <- struct{}{}
		}()
		if i >= 256 {
			<-done
		}
	}
	for range 256 {
		<-done
	}
	q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "x", Digest: "d", Body: []byte("{}"), Headers: map[string]string{}})
	b.ResetTimer()
	for range b.N {
		if _, err := q.Lease(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
}
