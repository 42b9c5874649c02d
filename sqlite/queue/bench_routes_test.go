package queue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// BenchmarkWriterRoutes is the queue writer's share of scripts/bench-routes
// (issue 45): the CPU time of the writer's own thread (it is locked to
// one) per delivery, which the rest of the process and the other agents
// on the box move far less than they move the wall time, from 32
// concurrent enqueuers of 1 KiB bodies:
//
//	one          a plain trigger's pending entry
//	routes       an accepting entry stored done (with its routing record,
//	             10 routes) and one route's entry, the route cycling
//	             through 10 triggers
//	accepting    the accepting entry alone (no route fed)
//	one-route    as routes, every delivery feeding the same route: what
//	             the 10 triggers' spread over the indexes costs
//
// WRITER_BENCH_SQL, statements separated by ';', runs on each fresh queue
// before the timing: "DROP INDEX entries_ready" prices that index
// (docs/performance.md, issue 45 round 11). The identity index cannot be
// dropped: the insert names it as its conflict target.
func BenchmarkWriterRoutes(b *testing.B) {
	pad := strings.Repeat("x", 1000)
	digest := strings.Repeat("a", 64)
	for _, kind := range []string{"one", "routes", "accepting", "one-route"} {
		b.Run(kind, func(b *testing.B) {
			q, err := queue.Open(context.Background(), filepath.Join(b.TempDir(), "q.sqlite"), queue.Options{MaxPending: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			benchSQL(b, q, os.Getenv("WRITER_BENCH_SQL"))
			var n atomic.Int64
			b.SetParallelism(16)
			c0, s0 := writerCPU(b, q), q.QueueStats().Commits
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					ev := fmt.Sprintf("b1-%d", i)
					body := []byte(`{"type":"t` + fmt.Sprint(i%10) + `","data":"` + pad + `"}`)
					hdr := map[string]string{"content-type": "application/json", "x-touba-event-id": ev}
					d := &touba.Delivery{TriggerRef: "trigger:bench/One", EventID: ev, Digest: digest, Body: body, Headers: hdr,
						RemoteAddr: "127.0.0.1", ProgramDigest: digest}
					if kind != "one" {
						routed(d, int(i%10), kind)
					}
					if _, err := q.Enqueue(context.Background(), d); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(writerCPU(b, q)-c0)/float64(time.Microsecond)/float64(b.N), "writer-cpu-us/op")
			b.ReportMetric(float64(q.QueueStats().Commits-s0)/float64(b.N), "commits/op")
		})
	}
}

// routed makes d an accepting trigger's delivery as intake hands it to
// the queue: done at once, its routing record, and route k's delivery.
func routed(d *touba.Delivery, k int, kind string) {
	d.TriggerRef, d.Done = "trigger:bench/Events", true
	r := &touba.Routing{Routes: make([]touba.RouteOutcome, 10)}
	for j := range r.Routes {
		r.Routes[j] = touba.RouteOutcome{TriggerRef: fmt.Sprintf("trigger:bench/Type%d", j), Code: touba.IntakeFiltered}
	}
	d.Routing = r
	if kind == "accepting" {
		return
	}
	if kind == "one-route" {
		k = 0
	}
	r.Routes[k] = touba.RouteOutcome{TriggerRef: fmt.Sprintf("trigger:bench/Type%d", k), Fed: true}
	d.Routes = []*touba.Delivery{{TriggerRef: r.Routes[k].TriggerRef, EventID: d.EventID, Digest: d.Digest, Body: d.Body,
		Headers: d.Headers, RemoteAddr: d.RemoteAddr, ProgramDigest: d.ProgramDigest}}
}

// benchSQL runs stmts (separated by ';') through q's writer.
func benchSQL(b *testing.B, q *queue.Queue, stmts string) {
	if strings.TrimSpace(stmts) == "" {
		return
	}
	if err := q.SubmitOp(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		for _, s := range strings.Split(stmts, ";") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return 0, fmt.Errorf("%s: %w", s, err)
			}
		}
		return 0, nil
	}); err != nil {
		b.Fatal(err)
	}
}

// writerCPU is the CPU time of the writer's thread so far, read on it.
func writerCPU(b *testing.B, q *queue.Queue) time.Duration {
	var d time.Duration
	if err := q.SubmitOp(func(context.Context, *sqlitex.Tx) (int64, error) {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
			return 0, err
		}
		d = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		return 0, nil
	}); err != nil {
		b.Fatal(err)
	}
	return d
}
