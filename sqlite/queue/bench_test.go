package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// BenchmarkEnqueueParallel measures durable enqueues through group commit
// with many concurrent callers, as intake makes them.
func BenchmarkEnqueueParallel(b *testing.B) {
	q, err := queue.Open(context.Background(), filepath.Join(b.TempDir(), "q.sqlite"), queue.Options{MaxPending: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	body := make([]byte, 1024)
	digest := dedupe.Digest(body)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			d := &touba.Delivery{TriggerRef: "trigger:b/B", EventID: fmt.Sprintf("e-%d", i), Digest: digest, Body: body}
			if _, err := q.Enqueue(context.Background(), d); err != nil {
				b.Error(err)
				return
			}
		}
	})
	st := q.QueueStats()
	b.ReportMetric(float64(st.Batched)/float64(st.Commits), "reqs/commit")
}

// BenchmarkEnqueueWithMatches is BenchmarkEnqueueParallel for deliveries
// that carry durable steps' match values (an offer no wait takes, a cancel
// that finds nothing, a cancel key): what they cost intake over none.
func BenchmarkEnqueueWithMatches(b *testing.B) {
	q, err := queue.Open(context.Background(), filepath.Join(b.TempDir(), "q.sqlite"), queue.Options{MaxPending: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	body := make([]byte, 1024)
	digest := dedupe.Digest(body)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			v := fmt.Sprintf(`"order-%d"`, i)
			d := &touba.Delivery{TriggerRef: "trigger:b/B", EventID: fmt.Sprintf("e-%d", i), Digest: digest, Body: body,
				Offers:     []touba.MatchValue{{Key: touba.WaitKey("trigger:a/A", "paid"), Value: v}},
				Cancels:    []touba.MatchValue{{Key: touba.CancelKey("trigger:a/A", 0), Value: v}},
				CancelKeys: []touba.MatchValue{{Key: touba.CancelKey("trigger:b/B", 0), Value: v}}}
			if _, err := q.Enqueue(context.Background(), d); err != nil {
				b.Error(err)
				return
			}
		}
	})
	st := q.QueueStats()
	b.ReportMetric(float64(st.Batched)/float64(st.Commits), "reqs/commit")
}
