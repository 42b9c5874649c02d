package brokers_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
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
func BenchmarkE2E(b *testing.B) {
	n := 3000
	if s := os.Getenv("BROKER_BENCH_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	b.Run("accounting_stub", func(b *testing.B) { benchE2E(b, stubManifest, n, nil) })
	b.Run("nats", func(b *testing.B) {
		s := natstest.Start(b)
		s.Stream("ORDERS", 2*time.Minute, "orders.>")
		benchE2E(b, natsManifest(s.URL(), 10), n, func() int { return len(s.Messages("ORDERS")) })
	})
	b.Run("rabbitmq", func(b *testing.B) {
		r := newRabbit(b)
		benchE2E(b, rabbitManifest(r.URL(), 10, "reconcile"), n, func() int { return r.Count("orders.all") })
	})
}

func benchE2E(b *testing.B, manifest string, n int, stored func() int) {
	dir := b.TempDir()
	prog := filepath.Join(dir, "program.air.json")
	man := filepath.Join(dir, "touba.manifest.json")
	for p, text := range map[string]string{prog: program, man: manifest} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()
	d := testkit.Start(b, nil, "serve", prog, "--manifest", man, "--queue", filepath.Join(dir, "q.sqlite"),
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--admin-socket", filepath.Join(dir, "admin.sock"), "--listen", "127.0.0.1:0", "--metrics-listen", metricsAddr)
	url := d.URL() + "/triggers/shop/Orders"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ResetTimer()
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
	b.StopTimer()
	b.ReportMetric(float64(n)/took.Seconds(), "deliveries/s")
	b.ReportMetric(float64(n)/posted.Seconds(), "posted/s")
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
