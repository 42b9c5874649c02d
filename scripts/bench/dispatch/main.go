// Command dispatch measures the dispatcher end to end on real files:
// N entries are queued, then drained by W workers through one binding,
// and it prints effects per second and durable commits (fsyncs) per
// effect across the queue, state and journal files.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

// countingQueue counts leases and the entries that ended, and closes ended
// once all of them did: the drain's end is seen without scanning the queue
// (a CountByStatus every 20 ms was about 6% of the drain's CPU, and none
// of it the dispatcher's). A lease commits through the queue's writer
// (with the Finish calls queued before it), so the writer's commits count
// its fsyncs already.
type countingQueue struct {
	*queue.Queue
	leases   atomic.Int64
	finished atomic.Int64
	want     int64
	ended    chan struct{}
}

func (c *countingQueue) Lease(ctx context.Context, n int) ([]*touba.Delivery, error) {
	c.leases.Add(1)
	return c.Queue.Lease(ctx, n)
}

// LeasePlanned counts a planned lease (fair dispatch) as Lease does.
func (c *countingQueue) LeasePlanned(ctx context.Context, plan touba.LeasePlan) ([]*touba.Delivery, error) {
	c.leases.Add(1)
	return c.Queue.LeasePlanned(ctx, plan)
}

func (c *countingQueue) Finish(ctx context.Context, queueID string, token int64, status, code, message string) error {
	err := c.Queue.Finish(ctx, queueID, token, status, code, message)
	if err == nil && c.finished.Add(1) == c.want {
		close(c.ended)
	}
	return err
}

func main() {
	// The daemon's GC setting (cmd/touba-trigger/main.go), so that the
	// figures are those of the daemon a user runs.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(300)
	}
	n := flag.Int("n", 5000, "entries")
	workers := flag.Int("workers", 64, "dispatcher workers")
	kind := flag.String("handler", "stub", "stub or process")
	command := flag.String("command", "", "process handler command")
	args := flag.String("args", "", "arguments of the process handler command, space-separated")
	persistent := flag.Bool("persistent", false, "one long-lived process handler (SPEC §4.1) instead of one per call")
	maxInFlight := flag.Int("max-in-flight", 64, "max_in_flight of a persistent handler")
	contract := flag.String("contract", "external_write", "external_write (journal) or none (no journal)")
	dir := flag.String("dir", "", "folder for the files (a temp folder if empty)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the drain here")
	countFsyncs := flag.Bool("strace", false, "count the drain's fsync and fdatasync calls with strace (slows the drain: for the count, not the rate)")
	phase := flag.String("phase", "all", "all: queue n entries, then drain them; fill: queue them in -dir and stop; drain: drain the n entries a fill left in -dir (to profile or count the drain alone)")
	bodySize := flag.Int("body", 0, "body bytes: a JSON object of about that size (0: a small order, 34 bytes)")
	keys := flag.Int("keys", 0, "concurrency keys at max 1, entries spread over them round robin (0: unkeyed)")
	flag.Parse()
	if *dir == "" {
		d, err := os.MkdirTemp("", "bench-dispatch-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	ctx := context.Background()

	handlerJSON := `{"kind": "accounting_stub"}`
	if *kind == "process" {
		h := map[string]any{"kind": "process", "command": *command, "args": append([]string{}, strings.Fields(*args)...)}
		if *persistent {
			h["persistent"] = map[string]int{"max_in_flight": *maxInFlight}
		}
		b, err := json.Marshal(h)
		if err != nil {
			log.Fatal(err)
		}
		handlerJSON = string(b)
	}
	ec := `{"kind": "external_write", "retry_mode": "idempotency_key"}`
	if *contract == "none" {
		ec = `{"kind": "none"}`
	}
	m, err := manifest.Parse(filepath.Join(*dir, "m.json"), []byte(fmt.Sprintf(`{"manifest_version": "touba-manifest-v1",
		"bindings": {"tool:bench/Write": {"handler": %s, "grants": ["network"], "effect_contract": %s}}}`, handlerJSON, ec)))
	if err != nil {
		log.Fatal(err)
	}
	p, err := trigger.ParseProgram("p.json", []byte(`{"air_version": "touba-air-v1", "triggers": [
		{"ref": "trigger:bench/D", "source": {"kind": "webhook"},
		 "steps": [{"id": "write", "tool": "tool:bench/Write", "input": {"order": {"$ref": "/event/body"}}}]}]}`))
	if err != nil {
		log.Fatal(err)
	}
	res, err := m.Resolve(nil)
	if err != nil {
		log.Fatal(err)
	}

	jpath := filepath.Join(*dir, "j.sqlite")
	lock, err := journal.AcquireLock(jpath, journal.LockOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release()
	j, q, st := openStores(ctx, *dir)
	body, _ := json.Marshal(map[string]any{"order_id": 42, "lines": []string{"a", "b"}})
	if *bodySize > len(`{"data":""}`) {
		body = []byte(`{"data":"` + strings.Repeat("x", *bodySize-len(`{"data":""}`)) + `"}`)
	}
	// Queued by 32 goroutines, so that group commit makes the set-up
	// quick; ids are taken in order, so entries are roughly in order.
	var next atomic.Int64
	if *phase == "drain" {
		next.Store(int64(*n))
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < *n; i = int(next.Add(1) - 1) {
				d := &touba.Delivery{TriggerRef: "trigger:bench/D", EventID: fmt.Sprintf("e%d", i),
					Digest: dedupe.Digest(body), Body: body}
				if *keys > 0 {
					d.ConcKey, d.ConcMax = fmt.Sprintf(`"k%d"`, i%*keys), 1
				}
				if _, err := q.Enqueue(ctx, d); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	if *phase != "drain" {
		// The drain starts on the files as a restarted daemon finds them,
		// the fill's WAL checkpointed by the close: copying it, and
		// collecting the fill's garbage, are not the drain's work.
		st.Close()
		q.Close()
		j.Close()
		if *phase == "fill" {
			return
		}
		j, q, st = openStores(ctx, *dir)
		runtime.GC()
	}
	cfg, err := dispatcher.NewConfig(p, m, res, true, &dispatcher.Stubs{}, dispatcher.Outbound{}, zerolog.Nop())
	if err != nil {
		log.Fatal(err)
	}
	cq := &countingQueue{Queue: q, want: int64(*n), ended: make(chan struct{})}
	qc0 := q.QueueStats().Commits
	jc0 := j.Stats().Commits
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var fc *fsyncCounter
	if *countFsyncs {
		if fc, err = startFsyncCounter(*dir); err != nil {
			log.Fatal(err)
		}
	}
	ru0 := cpuTime()
	start := time.Now()
	d := dispatcher.New(cq, st, j, cfg, dispatcher.Options{Workers: *workers, Log: zerolog.Nop()})
	if err := d.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-cq.ended
	elapsed := time.Since(start)
	cpu := cpuTime() - ru0
	if c, err := q.CountByStatus(ctx); err != nil {
		log.Fatal(err)
	} else if c[touba.StatusDone] != int64(*n) {
		log.Fatalf("not all done: %v", c)
	}
	if fc != nil {
		calls, err := fc.stop()
		if err != nil {
			log.Fatal(err)
		}
		defer fmt.Printf("strace: %d fsync+fdatasync calls during the drain, %.2f per effect\n", calls, float64(calls)/float64(*n))
	}
	d.Close(time.Second)
	sc, _ := st.BatchStats()
	qc := q.QueueStats().Commits - qc0
	jc := int64(j.Stats().Commits - jc0)
	mode := *kind
	if *kind == "process" {
		mode = "process-per-call(" + filepath.Base(*command) + ")"
		if *persistent {
			mode = fmt.Sprintf("persistent(%s,max_in_flight=%d)", filepath.Base(*command), *maxInFlight)
		}
	}
	fmt.Printf("handler=%s keys=%d contract=%s workers=%d entries=%d leases=%d elapsed=%v effects_per_s=%.0f us_per_effect=%.0f cpu_us_per_effect=%.0f fsyncs_per_effect=%.2f (queue %.2f, state %.2f, journal %.2f) load=%s\n",
		mode, *keys, *contract, *workers, *n, cq.leases.Load(), elapsed.Round(time.Millisecond), float64(*n)/elapsed.Seconds(),
		float64(elapsed.Microseconds())/float64(*n), float64(cpu.Microseconds())/float64(*n), float64(qc+sc+jc)/float64(*n),
		float64(qc)/float64(*n), float64(sc)/float64(*n), float64(jc)/float64(*n), loadavg())
	st.Close()
	q.Close()
	j.Close()
}

// openStores opens the journal, queue and state files of dir.
func openStores(ctx context.Context, dir string) (*journal.Journal, *queue.Queue, *state.State) {
	j, err := journal.Open(ctx, filepath.Join(dir, "j.sqlite"), journal.Options{})
	if err != nil {
		log.Fatal(err)
	}
	q, err := queue.Open(ctx, filepath.Join(dir, "q.sqlite"), queue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	st, err := state.Open(ctx, filepath.Join(dir, "s.sqlite"), state.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return j, q, st
}

// cpuTime is the CPU (user and system) this process has used: the
// dispatcher's cost per effect, which contention for the cores disturbs
// less than a rate does. A process handler's own CPU is not counted.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadavg is the 1-minute load average, printed with every figure.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
