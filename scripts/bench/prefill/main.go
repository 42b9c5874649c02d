// Command prefill fills a queue file with N pending entries through the
// queue package (group commit), so scripts/bench-ingest can measure intake
// and memory with a deep backlog; with -count it prints how many entries a
// queue file holds. With -gather its N entries make N/-per open gatherings
// instead (SPEC §2.1 debounce, a day's window): one entry of each key
// opens its gathering and waits in it, the others of the key are merged
// into it (scripts/bench-gather).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

func main() {
	path := flag.String("queue", "", "queue file")
	n := flag.Int64("n", 1_000_000, "entries to add")
	ref := flag.String("trigger", "trigger:bench/Ingest", "trigger ref of the entries")
	count := flag.Bool("count", false, "only print the number of entries by status")
	pause := flag.Bool("pause", false, "pause the trigger too (scripts/bench-held)")
	gather := flag.Bool("gather", false, "gather the entries into open debounce gatherings (scripts/bench-gather)")
	per := flag.Int64("per", 1, "with -gather: entries per gathering (one carries it, the others are merged)")
	flag.Parse()
	ctx := context.Background()
	if *count {
		q, err := queue.Open(ctx, *path, queue.Options{})
		if err != nil {
			log.Fatal(err)
		}
		defer q.Close()
		m, err := q.CountByStatus(ctx)
		if err != nil {
			log.Fatal(err)
		}
		total := int64(0)
		for _, v := range m {
			total += v
		}
		fmt.Println(total)
		return
	}
	q, err := queue.Open(ctx, *path, queue.Options{MaxPending: *n + 1_000_000, MaxBatch: 4096})
	if err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"prefill":"` + strings.Repeat("p", 1000) + `"}`)
	digest := dedupe.Digest(body)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 512; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > *n {
					return
				}
				d := &touba.Delivery{TriggerRef: *ref, EventID: fmt.Sprintf("prefill-%d", i), Digest: digest,
					Body: body, Headers: map[string]string{"content-type": "application/json"}, RemoteAddr: "prefill"}
				if *gather {
					// Entries i, i+N, i+2N... share key i: the first of
					// them opens its gathering before the others come.
					d.Gather = &touba.GatherSpec{Kind: touba.GatherDebounce, Key: touba.GatherKeyOf(touba.GatherDebounce, "/event/body/k"),
						Value: fmt.Sprintf(`"k%d"`, (i-1)%(*n / *per)), Window: 24 * time.Hour, MaxWait: 24 * time.Hour}
				}
				if _, err := q.Enqueue(ctx, d); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	if *pause {
		if _, err := q.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: *ref, At: time.Now(), Operator: "prefill"}); err != nil {
			log.Fatal(err)
		}
	}
	st := q.QueueStats()
	if err := q.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("prefilled %d entries in %v (%d commits)\n", *n, time.Since(start).Round(time.Millisecond), st.Commits)
}
