package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// BenchmarkFinishParallel drives b.N effects through Prepare, Dispatch and
// Finish from 16 goroutines, as 16 dispatcher workers would, and reports
// effects per second and commits (fsyncs) per effect.
func BenchmarkFinishParallel(b *testing.B) {
	const workers = 16
	ctx := context.Background()
	path := journalPath(b)
	j := mustOpen(b, path, journal.Options{})
	result := json.RawMessage(`{"external_id":"BILL-1","payload":{"amount":42}}`)
	base := j.Stats()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				id, call := fmt.Sprintf("q%d:step", i), fmt.Sprintf("w%d-%d", w, i)
				if _, err := j.Prepare(ctx, prep(fmt.Sprintf("q%d", i), id, call)); err != nil {
					b.Error(err)
					return
				}
				if err := j.Dispatch(ctx, fmt.Sprintf("q%d", i), id, call); err != nil {
					b.Error(err)
					return
				}
				if err := j.Finish(ctx, touba.EffectOutcome{Scope: fmt.Sprintf("q%d", i), EffectID: id, CallID: call,
					State: touba.EffectApplied, ReceiptRef: "BILL-1", Result: result}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	st := j.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "effects/s")
	b.ReportMetric(float64(st.Commits-base.Commits)/float64(b.N), "commits/effect")
	b.ReportMetric(float64(st.LargestBatch), "max-batch")
	if fi, err := os.Stat(path + "-wal"); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "wal-MB")
	}
}
