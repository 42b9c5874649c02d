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
	"github.com/touba/touba-trigger/trigger"
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
// The prefilled entries carry the trigger's program digest, as intake gives
// every entry it accepts: an entry without it looks accepted under another
// definition and pays a read of its gathering and of its cancels a run.
//
// WORKER_BENCH_N (default 5000) and WORKER_BENCH_L (default 200) set N and L;
// WORKER_BENCH_POLL_MS (default 10) how often /metrics is read for the
// count (each read costs the daemon a few ms of CPU: the slower kind, read
// more often per call, pays more of it).
// WORKER_BENCH_REF_BIN and WORKER_BENCH_REF_TOOL (another build's daemon and
// benchtool) add a third run each round, that build's worker, between the
// process and this build's worker, so two builds compare in one run;
// WORKER_BENCH_PPROF (a folder) writes an 8 s CPU profile of each worker
// run's daemon there, taken once a tenth of the calls are applied.
func BenchmarkWorkerVsProcess(b *testing.B) {
	if testing.Short() {
		b.Skip("runs the real binary for a minute")
	}
	n, l := envInt("WORKER_BENCH_N", 5000), envInt("WORKER_BENCH_L", 200)
	ours := benchBuild{bin: testkit.Binary(b), tool: benchTool}
	ref := benchBuild{bin: os.Getenv("WORKER_BENCH_REF_BIN"), tool: os.Getenv("WORKER_BENCH_REF_TOOL")}
	for i := range b.N {
		proc := benchKind(b, ours, "process", n, l, fmt.Sprintf("process-%d", i))
		if ref.bin != "" && ref.tool != "" {
			r := benchKind(b, ref, "worker", n, l, fmt.Sprintf("ref-%d", i))
			b.ReportMetric(r.rate, "ref-worker-calls/s")
			b.ReportMetric(r.rate/proc.rate, "ref-worker/process")
			b.ReportMetric(r.cpu, "ref-worker-cpu-ms/call")
			b.ReportMetric(r.commits, "ref-worker-commits/call")
			b.ReportMetric(ms(r.p50), "ref-worker-p50-ms")
		}
		work := benchKind(b, ours, "worker", n, l, fmt.Sprintf("ours-%d", i))
		b.ReportMetric(proc.rate, "process-calls/s")
		b.ReportMetric(work.rate, "worker-calls/s")
		b.ReportMetric(work.rate/proc.rate, "worker/process")
		b.ReportMetric(proc.cpu, "process-cpu-ms/call")
		b.ReportMetric(work.cpu, "worker-cpu-ms/call")
		b.ReportMetric(proc.commits, "process-commits/call")
		b.ReportMetric(work.commits, "worker-commits/call")
		b.ReportMetric(ms(proc.p50), "process-p50-ms")
		b.ReportMetric(ms(proc.p99), "process-p99-ms")
		b.ReportMetric(ms(work.p50), "worker-p50-ms")
		b.ReportMetric(ms(work.p99), "worker-p99-ms")
	}
}

type benchFigures struct {
	rate     float64
	cpu      float64 // ms of CPU a call, the daemon's and the tool's
	commits  float64 // the queue's and the journal's commits a call
	p50, p99 time.Duration
}

// benchBuild is one build's daemon and benchtool.
type benchBuild struct{ bin, tool string }

func benchKind(b *testing.B, build benchBuild, kind string, n, l int, name string) benchFigures {
	dir := b.TempDir()
	handler := fmt.Sprintf(`{"kind": "process", "command": %q, "persistent": {"max_in_flight": 16}}`, build.tool)
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
	prefill(b, q, n, benchDigest(b))
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
	pprofDir, pprofAddr := os.Getenv("WORKER_BENCH_PPROF"), ""
	if pprofDir != "" {
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		pprofAddr = pl.Addr().String()
		pl.Close()
		env = append(env, "TOUBA_PPROF="+pprofAddr)
	}
	d := testkit.StartCmd(b, exec.Command(build.bin, "serve", prog, "--manifest", man, "--queue", q,
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--admin-socket", filepath.Join(dir, "admin.sock"), "--listen", "127.0.0.1:0", "--metrics-listen", ml.Addr().String()), env)
	// The tool's process: the worker, or the persistent handler (the
	// daemon's child, found once it runs).
	var tool *os.Process
	if kind == "worker" {
		cmd := exec.Command(build.tool)
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
	a0, c0, k0 := 0, 0.0, 0
	var profiled sync.WaitGroup
	defer profiled.Wait()
	poll := time.Duration(envInt("WORKER_BENCH_POLL_MS", 10)) * time.Millisecond
	testkit.WaitForReport(b, time.Duration(envInt("WORKER_BENCH_WAIT_S", 600))*time.Second, testkit.Every(poll, func() bool {
		a := applied(metrics)
		if t0.IsZero() && a >= n/10 {
			t0, a0, c0, k0 = time.Now(), a, cpu(), commits(metrics)
			if pprofAddr != "" {
				profiled.Add(1)
				go func() {
					defer profiled.Done()
					benchProfile(b, pprofAddr, filepath.Join(pprofDir, name+".pprof"))
				}()
			}
		}
		return a >= n
	}), "every prefilled call applied", func() { b.Log(d.Log()) })
	fig := benchFigures{rate: float64(n-a0) / time.Since(t0).Seconds(), cpu: (cpu() - c0) * 1000 / clockTicks / float64(n-a0),
		commits: float64(commits(metrics)-k0) / float64(n-a0)}

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
	// Each round's figures, with the load they were taken under: -count
	// repeats the benchmark, and its metrics are only the last round's.
	b.Logf("%s: %.0f calls/s, %.2f ms CPU/call, %.2f commits/call, p50 %.2f ms, p99 %.2f ms, load %s",
		name, fig.rate, fig.cpu, fig.commits, ms(fig.p50), ms(fig.p99), loadAvg())
	d.Signal(syscall.SIGTERM)
	d.Wait(time.Minute)
	return fig
}

// loadAvg is the 1, 5 and 15 minute load averages, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// benchDigest is trigger:bench/Orders's program digest, which intake
// would give each of its entries.
func benchDigest(b *testing.B) string {
	p, err := trigger.ParseProgram("bench.air.json", []byte(benchProgram))
	if err != nil {
		b.Fatal(err)
	}
	return p.Triggers[0].Digest
}

// benchProfile writes an 8 s CPU profile of the daemon serving pprof at
// addr to path.
func benchProfile(b *testing.B, addr, path string) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=8")
	if err != nil {
		b.Log(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		b.Log(err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		b.Log(err)
	}
}

// prefill puts n pending deliveries of trigger:bench/Orders in the queue
// file at path, accepted under digest.
func prefill(b *testing.B, path string, n int, digest string) {
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
					Body: body, Headers: map[string]string{"content-type": "application/json"}, RemoteAddr: "prefill", ProgramDigest: digest}
				if _, err := q.Enqueue(ctx, d); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// commits is touba_queue_commits_total plus touba_journal_commits_total at
// url: each a transaction and a sync.
func commits(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	total := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && (f[0] == "touba_queue_commits_total" || f[0] == "touba_journal_commits_total") {
			v, _ := strconv.ParseFloat(f[1], 64)
			total += int(v)
		}
	}
	return total
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
