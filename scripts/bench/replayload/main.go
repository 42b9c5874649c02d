// Command replayload measures what a bulk replay (SPEC §6 `queue replay
// --status failed`) costs intake: it fills a queue file with -n failed
// entries (straight SQL, the setup), starts the real daemon on it
// (--workers 0 unless -workers is given, so only intake and the replay
// share the queue's writer), keeps -conns senders POSTing real webhooks,
// and prints intake latency percentiles before the replay and while it
// runs, and how long the replay took.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:bench/Ingest", "source": {"kind": "webhook"},
   "steps": [{"id": "post", "tool": "tool:bench/Post", "input": {"body": {"$ref": "/event/body"}}}]}]}`

const manifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:bench/Post": {"handler": {"kind": "accounting_stub"},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

type sample struct {
	at  time.Time
	lat time.Duration
}

func main() {
	bin := flag.String("bin", "", "the touba-trigger binary")
	n := flag.Int("n", 100_000, "failed entries to replay")
	conns := flag.Int("conns", 8, "concurrent senders")
	workers := flag.Int("workers", 0, "the daemon's --workers")
	base := flag.Duration("baseline", 5*time.Second, "intake alone, before the replay")
	extra := flag.String("replay-args", "", "more arguments of queue replay, space separated")
	reason := flag.String("reason", "bench", "the replay's --reason; empty for none (a binary older than --reason)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "replayload")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	os.WriteFile(p("program.air.json"), []byte(program), 0o600)
	os.WriteFile(p("touba.manifest.json"), []byte(manifest), 0o600)
	fill(p("q.sqlite"), *n)

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d := exec.Command(*bin, "serve", p("program.air.json"), "--manifest", p("touba.manifest.json"), "--queue", p("q.sqlite"),
		"--state", p("s.sqlite"), "--effect-journal", p("j.sqlite"), "--admin-socket", p("admin.sock"), "--listen", addr,
		"--metrics-listen", "", "--workers", fmt.Sprint(*workers), "--max-pending", "100000000", "--log-level", "warn")
	d.Stderr = os.Stderr
	if err := d.Start(); err != nil {
		log.Fatal(err)
	}
	stopDaemon := func() { d.Process.Signal(os.Interrupt); d.Wait() }
	defer stopDaemon()
	fatal := func(format string, args ...any) { stopDaemon(); log.Fatalf(format, args...) }
	url := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		if r, err := http.Get(url + "/readyz"); err == nil && r.StatusCode == 200 {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			fatal("daemon not ready")
		}
		time.Sleep(50 * time.Millisecond)
	}

	var mu sync.Mutex
	var samples []sample
	var seq, failed atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *conns}}
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sample
			for ctx.Err() == nil {
				i := seq.Add(1)
				req, _ := http.NewRequest(http.MethodPost, url+"/triggers/bench/Ingest", bytes.NewReader([]byte(fmt.Sprintf(`{"n": %d}`, i))))
				req.Header.Set("x-touba-event-id", fmt.Sprint("load-", i))
				start := time.Now()
				resp, err := hc.Do(req)
				lat := time.Since(start)
				if err != nil || resp.StatusCode != 202 {
					failed.Add(1)
				}
				if resp != nil {
					resp.Body.Close()
				}
				mine = append(mine, sample{start, lat})
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	time.Sleep(*base)
	args := []string{"queue", "replay", "--status", "failed", "--admin-socket", p("admin.sock")}
	if *reason != "" {
		args = append(args, "--reason", *reason)
	}
	if *extra != "" {
		args = append(args, strings.Fields(*extra)...)
	}
	rStart := time.Now()
	out, err := exec.Command(*bin, args...).CombinedOutput()
	rEnd := time.Now()
	if err != nil {
		fatal("replay: %v\n%s", err, out)
	}
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fmt.Printf("replay of %d failed entries: %v (%s)\n", *n, rEnd.Sub(rStart).Round(time.Millisecond), lines[len(lines)-1])
	var before, during []time.Duration
	for _, s := range samples {
		switch {
		case s.at.Before(rStart):
			before = append(before, s.lat)
		case s.at.Before(rEnd):
			during = append(during, s.lat)
		}
	}
	report("intake before the replay", before, rStart.Sub(rStart.Add(-*base)))
	report("intake during the replay", during, rEnd.Sub(rStart))
	fmt.Printf("non-202 answers: %d\n", failed.Load())
}

func report(label string, lat []time.Duration, span time.Duration) {
	if len(lat) == 0 {
		fmt.Printf("%s: no requests\n", label)
		return
	}
	sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
	q := func(f float64) time.Duration {
		return lat[min(len(lat)-1, int(f*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	fmt.Printf("%s: %d requests (%.0f/s)  p50 %v  p99 %v  p99.9 %v  max %v\n", label, len(lat),
		float64(len(lat))/span.Seconds(), q(0.50), q(0.99), q(0.999), lat[len(lat)-1].Round(10*time.Microsecond))
}

// fill creates the queue file with the schema and n failed entries.
func fill(path string, n int) {
	ctx := context.Background()
	q, err := queue.Open(ctx, path, queue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	q.Close()
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		log.Fatal(err)
	}
	st, err := tx.Prepare(`INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at,
		status, attempts, error_code, error_message, updated_at) VALUES (?, 'trigger:bench/Ingest', ?, ?, ?, '{}', '127.0.0.1:1', ?,
		'failed', 3, 'HandlerFailed', 'boom', ?)`)
	if err != nil {
		log.Fatal(err)
	}
	first := time.Now().Add(-time.Duration(n) * time.Millisecond)
	for i := range n {
		at := first.Add(time.Duration(i) * time.Millisecond)
		body := []byte(fmt.Sprintf(`{"failed": %d}`, i))
		ts := touba.FormatTime(at)
		if _, err := st.Exec(uuidAt(at), fmt.Sprint("failed-", i), dedupe.Digest(body), body, ts, ts); err != nil {
			log.Fatal(err)
		}
	}
	st.Close()
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

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
