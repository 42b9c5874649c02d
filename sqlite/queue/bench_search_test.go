package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// searchBenchN entries fill the benchmark's queue: one every 600 ms over
// the last week, so a 24 h window holds about 144,000 of them.
const searchBenchN = 1_000_000

// uuidAt is a UUIDv7 of time t: what queue ids are, so queue order is
// arrival order as in a real queue.
func uuidAt(t time.Time) string {
	var b [16]byte
	rand.Read(b[:])
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// fillForSearch bulk-inserts n entries into q (one transaction per 50,000
// rows, straight SQL: the benchmark's setup, not what it measures).
func fillForSearch(tb testing.TB, q *Queue, n int, now time.Time) {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	first := now.Add(-time.Duration(n) * 600 * time.Millisecond)
	for lo := 0; lo < n; lo += 50_000 {
		tx, err := q.db.Write.BeginTx(ctx, nil)
		if err != nil {
			tb.Fatal(err)
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr,
			received_at, status, attempts, error_code, updated_at) VALUES (?, ?, ?, ?, ?, '{}', '192.0.2.1:1', ?, ?, 1, ?, ?)`)
		if err != nil {
			tb.Fatal(err)
		}
		for i := lo; i < min(lo+50_000, n); i++ {
			at := first.Add(time.Duration(i) * 600 * time.Millisecond)
			body := fmt.Sprintf(`{"order_id": %d, "customer": {"id": "cus_%d", "country": "FR"}, "amount": %d, "note": "%060d"}`,
				i, i%50_000, i%1000, i)
			status, code := touba.StatusDone, ""
			if i%100 == 0 {
				status, code = touba.StatusFailed, touba.EHandlerFailed
			}
			ts := touba.FormatTime(at)
			if _, err := st.ExecContext(ctx, uuidAt(at), fmt.Sprintf("trigger:bench/T%d", i%3), fmt.Sprintf("ev-%d", i),
				dedupe.Digest([]byte(body)), []byte(body), ts, status, code, ts); err != nil {
				tb.Fatal(err)
			}
		}
		st.Close()
		if err := tx.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Logf("filled %d entries in %v", n, time.Since(start).Round(time.Second))
}

// BenchmarkSearch times the operator's searches (SPEC §6 `queue ls
// --event-id | --body`) over 1,000,000 entries: an event-id search (the
// identity index, with and without the trigger), a queue-id search, and a
// body search of the last 24 h bounded at 10,000 entries examined. Set
// TOUBA_BENCH_SEARCH_QUEUE to a path to keep the filled file between runs.
func BenchmarkSearch(b *testing.B) {
	path := os.Getenv("TOUBA_BENCH_SEARCH_QUEUE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "q.sqlite")
	}
	ctx := context.Background()
	_, statErr := os.Stat(path)
	q, err := Open(ctx, path, Options{MaxPending: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	now := time.Now()
	if os.IsNotExist(statErr) {
		fillForSearch(b, q, searchBenchN, now)
		if _, err := q.db.Write.ExecContext(ctx, `ANALYZE`); err != nil {
			b.Fatal(err)
		}
	}
	mid, err := q.Search(ctx, touba.EntrySearch{EventID: fmt.Sprintf("ev-%d", searchBenchN/2)})
	if err != nil || len(mid.Entries) != 1 {
		b.Fatalf("event id search: %v %+v", err, mid)
	}
	plan := func(query string, args ...any) string {
		out, err := sqlitex.QueryPlan(ctx, q.db.Read, query, args...)
		if err != nil {
			b.Fatal(err)
		}
		sort.Strings(out)
		j, _ := json.Marshal(out)
		return string(j)
	}
	b.Logf("event-id plan: %s", plan(triggersCTE+`SELECT queue_id FROM entries WHERE trigger_ref IN (SELECT ref FROM refs WHERE ref IS NOT NULL)
		AND event_id = ? AND event_id != '' ORDER BY queue_id DESC`, "ev-1"))
	cases := []struct {
		name string
		s    touba.EntrySearch
	}{
		{"EventID", touba.EntrySearch{EventID: fmt.Sprintf("ev-%d", searchBenchN/2)}},
		{"EventIDTrigger", touba.EntrySearch{EventID: fmt.Sprintf("ev-%d", searchBenchN/2), TriggerRef: mid.Entries[0].TriggerRef}},
		{"QueueID", touba.EntrySearch{QueueID: mid.Entries[0].QueueID}},
		// 1 match in 50,000: the scan stops at MaxScan with more left.
		{"Body24hBounded", touba.EntrySearch{Pointer: "/customer/id", Value: json.RawMessage(`"cus_123"`),
			Since: now.Add(-24 * time.Hour), MaxScan: touba.DefaultSearchMaxScan}},
		{"Body24hFailedBounded", touba.EntrySearch{Pointer: "/customer/country", Value: json.RawMessage(`"FR"`),
			Status: touba.StatusFailed, Since: now.Add(-24 * time.Hour), MaxScan: touba.DefaultSearchMaxScan}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var res *touba.SearchResult
			for b.Loop() {
				if res, err = q.Search(ctx, c.s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(res.Scanned), "scanned")
			b.ReportMetric(float64(len(res.Entries)), "found")
			if res.More {
				b.ReportMetric(1, "more")
			}
		})
	}
}
