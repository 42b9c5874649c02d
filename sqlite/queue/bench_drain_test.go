package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// BenchmarkDrain measures the queue's share of a drain: b.N entries leased
// 16 at a time and finished done by 16 concurrent callers (group commit),
// unkeyed and spread over 1,000 keys at max 1 (scripts/bench-dispatch's
// keyed part without the state and journal files). Run with
// TOUBA_TEST_SQLITE_SYNC_OFF=1 to see the CPU cost rather than the disk's.
func BenchmarkDrain(b *testing.B) {
	for _, keys := range []int{0, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			ctx := context.Background()
			q, err := queue.Open(ctx, filepath.Join(b.TempDir(), "q.sqlite"), queue.Options{MaxPending: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			body := make([]byte, 256)
			for i := 0; i < b.N; i++ {
				d := &touba.Delivery{TriggerRef: "trigger:b/B", EventID: fmt.Sprintf("e-%d", i), Digest: dedupe.Digest(body), Body: body}
				if keys > 0 {
					d.ConcKey, d.ConcMax = fmt.Sprintf(`"k%d"`, i%keys), 1
				}
				if _, err := q.Enqueue(ctx, d); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for done := 0; done < b.N; {
				es, err := q.Lease(ctx, 16)
				if err != nil {
					b.Fatal(err)
				}
				if len(es) == 0 {
					b.Fatalf("nothing to lease after %d of %d", done, b.N)
				}
				var wg sync.WaitGroup
				for _, e := range es {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := q.Finish(ctx, e.QueueID, e.LeaseToken, touba.StatusDone, "", ""); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
				done += len(es)
			}
		})
	}
}
