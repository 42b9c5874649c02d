// Command waiting is the Go side of scripts/bench-waiting: it fills queue
// files through the store API (fast, no HTTP) and reads back what the
// daemon did to them.
//
//	waiting fill -queue Q -program P -sleeping N -pending M
//	    N entries of trigger:bench/Sleep made waiting (a sleep 30 days
//	    away: leased, then BeginWait, as the dispatcher does), then M
//	    pending entries of trigger:bench/Ingest.
//	waiting naps -queue Q -program P -n N -from D -over W -ids FILE
//	    N pending entries of trigger:bench/Nap whose sleep ends at
//	    now+D+i*W/N (sleep.until from the body), their ids into FILE.
//	waiting drained -state S -ready-ms T
//	    seconds from the first run of trigger:bench/Drain (the fill's
//	    pending entries) to the end of its last, read from the state file
//	    of the stopped daemon: a drain timed without polling the queue
//	    while it runs; and when the first run began after T (unix ms:
//	    /readyz answered).
//	waiting report -queue Q -state S -ids FILE
//	    for those entries: actual wake (the wait's resolved_at) minus
//	    wake_at, and the end of the run after it (the next step done)
//	    minus wake_at: p50, p99, max.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: waiting fill|naps|report [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	qpath := fs.String("queue", "", "queue file")
	spath := fs.String("state", "", "state file (report)")
	ppath := fs.String("program", "", "program file (fill, naps): the digests entries record")
	sleeping := fs.Int("sleeping", 100000, "fill: waiting entries")
	pending := fs.Int("pending", 0, "fill: pending entries")
	n := fs.Int("n", 2000, "naps: entries")
	from := fs.Duration("from", 15*time.Second, "naps: first wake, from now")
	over := fs.Duration("over", 5*time.Second, "naps: wakes spread over")
	ids := fs.String("ids", "", "naps, report: file of queue ids")
	readyMS := fs.Int64("ready-ms", 0, "drained: when the daemon was ready, unix ms")
	fs.Parse(os.Args[2:])
	ctx := context.Background()
	switch os.Args[1] {
	case "fill":
		q, ws, digests := open(ctx, *qpath, *ppath)
		fill(ctx, q, ws, digests, *sleeping, *pending)
		check(q.Close())
	case "naps":
		q, _, digests := open(ctx, *qpath, *ppath)
		naps(ctx, q, digests, *n, *from, *over, *ids)
		check(q.Close())
	case "report":
		report(ctx, *qpath, *spath, *ids)
	case "drained":
		drained(*spath, *readyMS)
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// open opens the queue for writing and stores the program's definitions
// (as the daemon does at start), returning each trigger's digest.
func open(ctx context.Context, qpath, ppath string) (*queue.Queue, touba.WaitStore, map[string]string) {
	b, err := os.ReadFile(ppath)
	check(err)
	p, err := trigger.ParseProgram(ppath, b)
	check(err)
	q, err := queue.Open(ctx, qpath, queue.Options{MaxPending: 10_000_000, MaxBatch: 4096})
	check(err)
	// An interface assertion, not a method call: this builds before the
	// store implements waits, and says so when run.
	ws, ok := any(q).(touba.WaitStore)
	if !ok {
		log.Fatal("the SQLite queue does not implement touba.WaitStore (the wait-sqlite piece is not merged)")
	}
	digests := map[string]string{}
	for _, tr := range p.Triggers {
		check(ws.SaveProgram(ctx, tr.Digest, tr.Definition))
		digests[tr.Ref] = tr.Digest
	}
	return q, ws, digests
}

// parallel runs f(i) for i in [0, n) on 64 goroutines, so that the
// queue's group commit batches the writes.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

func enqueue(ctx context.Context, q *queue.Queue, ref, digest, eventID string, body []byte) string {
	r, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: ref, EventID: eventID, Digest: dedupe.Digest(body), Body: body,
		Headers: map[string]string{"content-type": "application/json"}, RemoteAddr: "prefill", ProgramDigest: digest})
	check(err)
	return r.QueueID
}

func fill(ctx context.Context, q *queue.Queue, ws touba.WaitStore, digests map[string]string, sleeping, pending int) {
	start := time.Now()
	body := []byte(`{"order_id": 42, "lines": ["a", "b"]}`)
	parallel(sleeping, func(i int) {
		enqueue(ctx, q, "trigger:bench/Sleep", digests["trigger:bench/Sleep"], fmt.Sprintf("sleep-%d", i), body)
	})
	enq := time.Since(start)
	// Lease them in batches and begin each one's sleep, as a run does.
	wakeAt := time.Now().Add(30 * 24 * time.Hour)
	begun := 0
	for begun < sleeping {
		ds, err := q.Lease(ctx, 512)
		check(err)
		if len(ds) == 0 {
			log.Fatalf("leased nothing after %d of %d sleeps", begun, sleeping)
		}
		var wg sync.WaitGroup
		for _, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, err := ws.BeginWait(ctx, d.LeaseToken, touba.Wait{QueueID: d.QueueID, StepID: "nap", Kind: touba.WaitSleep, WakeAt: &wakeAt})
				check(err)
				if w.State != touba.WaitOpen {
					log.Fatalf("BeginWait of %s: %+v, want open", d.QueueID, w)
				}
			}()
		}
		wg.Wait()
		begun += len(ds)
	}
	waited := time.Since(start) - enq
	parallel(pending, func(i int) {
		enqueue(ctx, q, "trigger:bench/Drain", digests["trigger:bench/Drain"], fmt.Sprintf("pending-%d", i), body)
	})
	c, err := q.CountByStatus(ctx)
	check(err)
	if c[touba.StatusWaiting] != int64(sleeping) || c[touba.StatusPending] != int64(pending) {
		log.Fatalf("after the fill: %v, want %d waiting and %d pending", c, sleeping, pending)
	}
	fmt.Printf("filled: %d waiting (enqueued in %v, made waiting in %v), %d pending, in %v\n",
		sleeping, enq.Round(time.Millisecond), waited.Round(time.Millisecond), pending, time.Since(start).Round(time.Millisecond))
}

func naps(ctx context.Context, q *queue.Queue, digests map[string]string, n int, from, over time.Duration, idsPath string) {
	t0 := time.Now().Add(from)
	out := make([]string, n)
	parallel(n, func(i int) {
		at := t0.Add(time.Duration(i) * over / time.Duration(n)).UTC().Format("2006-01-02T15:04:05.000Z07:00")
		out[i] = enqueue(ctx, q, "trigger:bench/Nap", digests["trigger:bench/Nap"], fmt.Sprintf("nap-%d", i),
			[]byte(`{"wake_at": "`+at+`"}`))
	})
	check(os.WriteFile(idsPath, []byte(strings.Join(out, "\n")+"\n"), 0o600))
	fmt.Printf("naps: %d, waking from %s over %v\n", n, t0.UTC().Format(time.RFC3339), over)
}

func report(ctx context.Context, qpath, spath, idsPath string) {
	q, err := queue.Open(ctx, qpath, queue.Options{ReadOnly: true})
	check(err)
	defer q.Close()
	ws, ok := any(q).(touba.WaitStore)
	if !ok {
		log.Fatal("the SQLite queue does not implement touba.WaitStore")
	}
	st, err := state.Open(ctx, spath, state.Options{ReadOnly: true})
	check(err)
	defer st.Close()
	f, err := os.Open(idsPath)
	check(err)
	defer f.Close()
	var wake, next []time.Duration
	notWaited, notDone := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		qid := sc.Text()
		d, err := q.Get(ctx, qid)
		check(err)
		if d.Status != touba.StatusDone {
			notDone++
		}
		waits, err := ws.Waits(ctx, qid)
		check(err)
		i := slices.IndexFunc(waits, func(w touba.Wait) bool { return w.QueueID == qid && w.StepID == "nap" })
		if i < 0 || waits[i].ResolvedAt == nil || waits[i].WakeAt == nil {
			notWaited++ // began after its time: no wait
			continue
		}
		w := waits[i]
		wake = append(wake, w.ResolvedAt.Sub(*w.WakeAt))
		// The run after the wake ends with the step after the sleep
		// (the last step needs no checkpoint: its run's end is the mark).
		runs, err := st.Runs(ctx, qid)
		check(err)
		if len(runs) > 0 && runs[len(runs)-1].EndedAt != nil {
			next = append(next, runs[len(runs)-1].EndedAt.Sub(*w.WakeAt))
		}
	}
	check(sc.Err())
	if len(wake) == 0 {
		check(errors.New("no nap waited"))
	}
	fmt.Printf("wake latency (resolved_at - wake_at) over %d sleeps: %s\n", len(wake), dist(wake))
	fmt.Printf("wake to the run done (its last run's end - wake_at): %s\n", dist(next))
	fmt.Printf("naps that never waited (begun after their time): %d; not done: %d\n", notWaited, notDone)
}

func dist(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	pct := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (min %s)", ms(pct(0.50)), ms(pct(0.99)), ms(ds[len(ds)-1]), ms(ds[0]))
}

func drained(spath string, readyMS int64) {
	db, err := sql.Open("sqlite3", "file:"+spath+"?mode=ro")
	check(err)
	defer db.Close()
	var first, last sql.NullString
	var n int64
	check(db.QueryRow(`SELECT min(started_at), max(ended_at), count(*) FROM runs WHERE trigger_ref = 'trigger:bench/Drain' AND status = 'done'`).
		Scan(&first, &last, &n))
	if !last.Valid {
		log.Fatal("no run of trigger:bench/Drain ended")
	}
	begin, err := touba.ParseTime(first.String)
	check(err)
	end, err := touba.ParseTime(last.String)
	check(err)
	// The dispatcher may lease before /readyz answers: the drain is timed
	// from its first run, and the ready time shown beside it.
	fmt.Printf("drained=%d drain_s=%.3f first_run_after_ready_ms=%d\n", n, end.Sub(begin).Seconds(), begin.UnixMilli()-readyMS)
}
