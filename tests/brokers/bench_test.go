package brokers_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/natstest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// stubManifest is the accounting_stub binding: the same step, no broker.
const stubManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:orders/Publish": {"handler": {"kind": "accounting_stub"},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

// BenchmarkE2E is deliveries/s end to end at the daemon's defaults (only
// the required flags): posted by 32 concurrent senders, counted done when
// the binding's applied calls reach the count (touba_handler_calls_total).
// accounting_stub, nats (an embedded JetStream stream, file storage) and
// rabbitmq (a throwaway rabbitmq-server node, a durable queue, persistent
// messages, publisher confirms; skipped when it is not installed) in the
// same run. Run: go test ./tests/brokers -run '^$' -bench E2E -benchtime 1x
//
// Besides deliveries/s it reports the daemon's CPU (user + system) and the
// test process's (the senders, and the embedded NATS server for nats) per
// delivery, and the mean call time (touba_dispatch_latency_seconds). With
// BROKER_BENCH_BASE=PATH each kind runs a second time on that build of
// the binary (sub-benchmarks named KIND/this-N and KIND/base-N), alternating with this tree's
// in one run, BROKER_BENCH_ROUNDS times (default 1). With
// BROKER_BENCH_PPROF=DIR the daemon's CPU profile of the first 8 s of each
// run is written there; BROKER_BENCH_NATS_MAX_CONCURRENCY=N sets the nats
// binding's max_concurrency (the default otherwise).
func BenchmarkE2E(b *testing.B) {
	n := 3000
	if s := os.Getenv("BROKER_BENCH_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	builds := []string{""}
	if base := os.Getenv("BROKER_BENCH_BASE"); base != "" {
		builds = append(builds, base)
	}
	rounds := 1
	if s := os.Getenv("BROKER_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	for r := range rounds * len(builds) {
		bin := builds[r%len(builds)]
		// Each name once: a repeated one gets a "#01" suffix, and a '#' in
		// the temporary directory's path cuts the daemon's SQLite file URIs.
		name := func(kind string) string {
			if len(builds) == 1 && rounds == 1 {
				return kind
			}
			which := "this"
			if bin != "" {
				which = "base"
			}
			return fmt.Sprintf("%s/%s-%d", kind, which, r/len(builds)+1)
		}
		b.Run(name("accounting_stub"), func(b *testing.B) { benchE2E(b, bin, stubManifest, n, nil) })
		b.Run(name("nats"), func(b *testing.B) {
			s := natstest.Start(b)
			s.Stream("ORDERS", 2*time.Minute, "orders.>")
			man := natsManifest(s.URL(), 10)
			if mc := os.Getenv("BROKER_BENCH_NATS_MAX_CONCURRENCY"); mc != "" {
				man = strings.Replace(man, `"effect_contract"`, `"max_concurrency": `+mc+`, "effect_contract"`, 1)
			}
			benchE2E(b, bin, man, n, func() int { return len(s.Messages("ORDERS")) })
		})
		b.Run(name("rabbitmq"), func(b *testing.B) {
			r := newRabbit(b)
			benchE2E(b, bin, rabbitManifest(r.URL(), 10, "reconcile"), n, func() int { return r.Count("orders.all") })
		})
	}
}

func benchE2E(b *testing.B, bin, manifest string, n int, stored func() int) {
	dir := b.TempDir()
	prog := filepath.Join(dir, "program.air.json")
	man := filepath.Join(dir, "touba.manifest.json")
	for p, text := range map[string]string{prog: program, man: manifest} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	metricsAddr := freeAddr(b)
	if bin == "" {
		bin = testkit.Binary(b)
	}
	var env []string
	pprofDir := os.Getenv("BROKER_BENCH_PPROF")
	pprofAddr := ""
	if pprofDir != "" {
		pprofAddr = freeAddr(b)
		env = append(env, "TOUBA_PPROF="+pprofAddr)
	}
	d := testkit.StartCmd(b, exec.Command(bin, "serve", prog, "--manifest", man, "--queue", filepath.Join(dir, "q.sqlite"),
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--admin-socket", filepath.Join(dir, "admin.sock"), "--listen", "127.0.0.1:0", "--metrics-listen", metricsAddr), env)
	profiled := make(chan struct{})
	if pprofDir != "" {
		go func() {
			defer close(profiled)
			profile(b, pprofAddr, filepath.Join(pprofDir, strings.ReplaceAll(b.Name(), "/", "_")+".pprof"))
		}()
	} else {
		close(profiled)
	}
	url := d.URL() + "/triggers/shop/Orders"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ResetTimer()
	daemon0, self0 := cpuOf(b, d.Cmd.Process.Pid), selfCPU()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				body := fmt.Sprintf(`{"id": "ord-%d", "shop_domain": "shop-%d.example", "total": "10.00"}`, i, i%7)
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
				req.Header.Set("X-Touba-Event-Id", fmt.Sprintf("ord-%d", i))
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					b.Errorf("post: %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	posted := time.Since(start)
	testkit.WaitFor(b, 10*time.Minute, testkit.Every(100*time.Millisecond, func() bool {
		return applied(b, "http://"+metricsAddr+"/metrics") >= n
	}), "every delivery applied")
	took := time.Since(start)
	daemon1, self1 := cpuOf(b, d.Cmd.Process.Pid), selfCPU()
	b.StopTimer()
	b.ReportMetric(float64(n)/took.Seconds(), "deliveries/s")
	b.ReportMetric(float64(n)/posted.Seconds(), "posted/s")
	b.ReportMetric(float64((daemon1-daemon0).Microseconds())/float64(n), "daemon-µs/delivery")
	b.ReportMetric(float64((self1-self0).Microseconds())/float64(n), "test-µs/delivery")
	m := sums("http://" + metricsAddr + "/metrics")
	if count := m["touba_dispatch_latency_seconds_count"]; count > 0 {
		b.ReportMetric(m["touba_dispatch_latency_seconds_sum"]/count*1000, "call-ms")
	}
	if count := m["touba_journal_commit_seconds_count"]; count > 0 {
		b.ReportMetric(m["touba_journal_commit_seconds_sum"]/count*1000, "journal-commit-ms")
	}
	b.ReportMetric(m["touba_queue_commits_total"]/float64(n), "queue-commits/delivery")
	b.ReportMetric(m["touba_journal_commits_total"]/float64(n), "journal-commits/delivery")
	<-profiled
	if stored != nil {
		if got := stored(); got != n {
			b.Errorf("the broker holds %d messages, want %d", got, n)
		}
	}
	d.Signal(syscall.SIGTERM)
	d.Wait(60 * time.Second)
}

// applied reads touba_handler_calls_total{outcome="applied"} from a scrape.
func applied(tb testing.TB, url string) int {
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

// sums reads a scrape and sums each metric over its labels, by name.
func sums(url string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[name] += v
	}
	return out
}

// cpuOf is the user + system CPU time pid has used (/proc/PID/stat).
func cpuOf(tb testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 a second).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// selfCPU is the test process's user + system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// freeAddr is a loopback address with a port free now.
func freeAddr(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// profile writes a CPU profile of the daemon (TOUBA_PPROF at addr) over
// the first seconds of the run to path.
func profile(tb testing.TB, addr, path string) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=8")
	if err != nil {
		tb.Log(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		tb.Log(err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		tb.Log(err)
	}
}
