package workers_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// benchTool is testdata/benchtool.
var benchTool string

const benchProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:bench/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "post", "tool": "tool:bench/Post", "input": {"order": {"$ref": "/event/body"}}}]}]}`

// BenchmarkWorkerVsProcess: one tool (testdata/benchtool, an
// external_write under idempotency_key that answers applied at once)
// served as a persistent process handler (SPEC §4.1, max_in_flight 16)
// and as one Go worker over loopback (SPEC §4.3, handler.Worker,
// MaxInFlight 16), in the same run, on SQLite at the daemon's defaults:
//   - calls/s: N entries put in the queue file before the daemon starts,
//     timed from the sample at which a tenth of them were applied to the
//     last (so start-up and the worker connecting weigh on neither);
//   - latency at low load: L deliveries one at a time, each posted once the
//     one before is applied; from the 202 to the tool's write reaching the
//     remote side (an HTTP server in this process), p50 and p99.
//
// Each kind also reports the CPU it took per call in the timed window (the
// daemon's and the tool's, from /proc), steadier than calls/s on a box
// other work shares.
//
// WORKER_BENCH_N (default 5000) and WORKER_BENCH_L (default 200) set N and L;
// WORKER_BENCH_POLL_MS (default 10) how often /metrics is read for the
// count (each read costs the daemon a few ms of CPU: the slower kind, read
// more often per call, pays more of it).
func BenchmarkWorkerVsProcess(b *testing.B) {
	if testing.Short() {
		b.Skip("runs the real binary for a minute")
	}
	n, l := envInt("WORKER_BENCH_N", 5000), envInt("WORKER_BENCH_L", 200)
	for range b.N {
		proc := benchKind(b, "process", n, l)
		work := benchKind(b, "worker", n, l)
		b.ReportMetric(proc.rate, "process-calls/s")
		b.ReportMetric(work.rate, "worker-calls/s")
		b.ReportMetric(work.rate/proc.rate, "worker/process")
		b.ReportMetric(proc.cpu, "process-cpu-ms/call")
		b.ReportMetric(work.cpu, "worker-cpu-ms/call")
		b.ReportMetric(ms(proc.p50), "process-p50-ms")
		b.ReportMetric(ms(proc.p99), "process-p99-ms")
		b.ReportMetric(ms(work.p50), "worker-p50-ms")
		b.ReportMetric(ms(work.p99), "worker-p99-ms")
	}
}

type benchFigures struct {
	rate     float64
	cpu      float64 // ms of CPU a call, the daemon's and the tool's
	p50, p99 time.Duration
}

func benchKind(b *testing.B, kind string, n, l int) benchFigures {
	dir := b.TempDir()
	handler := fmt.Sprintf(`{"kind": "process", "command": %q, "persistent": {"max_in_flight": 16}}`, benchTool)
	if kind == "worker" {
		handler = `{"kind": "worker", "token": {"env": "WK_TOKEN"}}`
	}
	manifest := `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:bench/Post": {"handler": ` + handler + `, "grants": ["network"], "timeout_ms": 30000,
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`
	prog, man, q := filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json"), filepath.Join(dir, "q.sqlite")
	for p, text := range map[string]string{prog: benchProgram, man: manifest} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	prefill(b, q, n)
	pings := make(chan time.Time, 1)
	rl, err := net.Listen("tcp", "127.0.0.1:18977") // testdata/benchtool's remoteURL
	if err != nil {
		b.Fatal(err)
	}
	remote := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		_, _ = io.Copy(io.Discard, r.Body)
		pings <- at
	}))
	remote.Listener.Close()
	remote.Listener = rl
	remote.Start()
	defer remote.Close()
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	metrics := "http://" + ml.Addr().String() + "/metrics"
	ml.Close()
	env := []string{"WK_TOKEN=" + token}
	d := testkit.Start(b, env, "serve", prog, "--manifest", man, "--queue", q,
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--admin-socket", filepath.Join(dir, "admin.sock"), "--listen", "127.0.0.1:0", "--metrics-listen", ml.Addr().String())
	// The tool's process: the worker, or the persistent handler (the
	// daemon's child, found once it runs).
	var tool *os.Process
	if kind == "worker" {
		cmd := exec.Command(benchTool)
		cmd.Env = append(os.Environ(), append(env, "URL="+d.URL(), "TOKEN="+token)...)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
		tool = cmd.Process
	}
	cpu := func() float64 {
		if tool == nil {
			if out, err := exec.Command("pgrep", "-P", strconv.Itoa(d.Cmd.Process.Pid)).Output(); err == nil {
				if pid, err := strconv.Atoi(strings.Fields(string(out))[0]); err == nil {
					tool, _ = os.FindProcess(pid)
				}
			}
		}
		t := cpuTicks(d.Cmd.Process.Pid)
		if tool != nil {
			t += cpuTicks(tool.Pid)
		}
		return t
	}

	var t0 time.Time
	a0, c0 := 0, 0.0
	poll := time.Duration(envInt("WORKER_BENCH_POLL_MS", 10)) * time.Millisecond
	testkit.WaitForReport(b, time.Duration(envInt("WORKER_BENCH_WAIT_S", 600))*time.Second, testkit.Every(poll, func() bool {
		a := applied(metrics)
		if t0.IsZero() && a >= n/10 {
			t0, a0, c0 = time.Now(), a, cpu()
		}
		return a >= n
	}), "every prefilled call applied", func() { b.Log(d.Log()) })
	fig := benchFigures{rate: float64(n-a0) / time.Since(t0).Seconds(), cpu: (cpu() - c0) * 1000 / clockTicks / float64(n-a0)}

	var lat []time.Duration
	for i := range l {
		status, _ := testkit.Post(b, d.URL()+"/triggers/bench/Orders", "ping-"+strconv.Itoa(i), fmt.Sprintf(`{"ping": %d}`, i))
		sent := time.Now()
		if status != http.StatusAccepted {
			b.Fatalf("post: %d", status)
		}
		select {
		case at := <-pings:
			lat = append(lat, at.Sub(sent))
		case <-time.After(time.Minute):
			b.Fatalf("ping %d never reached the remote side\n%s", i, d.Log())
		}
		// One at a time: the next is posted once this one is journaled.
		testkit.WaitFor(b, time.Minute, testkit.Every(time.Millisecond, func() bool { return applied(metrics) >= n+i+1 }), "the ping applied")
	}
	slices.Sort(lat)
	fig.p50, fig.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	d.Signal(syscall.SIGTERM)
	d.Wait(time.Minute)
	return fig
}

// prefill puts n pending deliveries of trigger:bench/Orders in the queue
// file at path.
func prefill(b *testing.B, path string, n int) {
	ctx := context.Background()
	q, err := queue.Open(ctx, path, queue.Options{MaxPending: int64(n) + 1000})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	body := []byte(`{"order_id": "o"}`)
	// Enqueuers at once, so the queue's group commit makes this quick.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				d := &touba.Delivery{TriggerRef: "trigger:bench/Orders", EventID: fmt.Sprintf("pre-%d", i), Digest: dedupe.Digest(body),
					Body: body, Headers: map[string]string{"content-type": "application/json"}, RemoteAddr: "prefill"}
				if _, err := q.Enqueue(ctx, d); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// applied is touba_handler_calls_total{outcome="applied"} at url.
func applied(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	total := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "touba_handler_calls_total{") && strings.Contains(line, `outcome="applied"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += int(v)
		}
	}
	return total
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

// cpuTicks is the user and system time pid took, in clock ticks (0 once it
// is gone).
func cpuTicks(pid int) float64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which may hold spaces.
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return u + s
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
