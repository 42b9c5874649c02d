package trigger_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/trigger"
)

// numberFilterProgram is an unsigned trigger whose filter compares a
// sender's number with constants: the cost of that comparison is the
// sender's to choose (issue 21, item 3).
const numberFilterProgram = `{
  "air_version": "touba-air-v1",
  "triggers": [
    {"ref": "trigger:t/amount", "source": {"kind": "webhook"},
     "filter": [{"pointer": "/body/amount", "in": [1, 2.5, 1e3, 17e999999999]}],
     "steps": [{"id": "s", "tool": "tool:x/Y"}]}
  ]
}`

// numberBody is {"amount": 1777…} of exactly size bytes.
func numberBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"amount": 1`)
	for b.Len() < size-1 {
		b.WriteByte('7')
	}
	b.WriteByte('}')
	return b.Bytes()
}

func numberIntake(tb testing.TB) http.Handler {
	tb.Helper()
	q, err := queue.Open(context.Background(), filepath.Join(tb.TempDir(), "queue.sqlite"), queue.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { q.Close() })
	p, err := trigger.ParseProgram("program.air.json", []byte(numberFilterProgram))
	if err != nil {
		tb.Fatal(err)
	}
	in := &trigger.Intake{Queue: q}
	in.SetConfig(&trigger.Config{Program: p})
	return in.Router(nil)
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFilterNumber posts a body of one long number to a trigger with
// an `in` filter over numbers, through the intake's router; cpu-ms/op is
// the process's CPU time per request (decode, filter, answer).
func BenchmarkFilterNumber(b *testing.B) {
	for _, size := range []int{100 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("body=%dKiB", size>>10), func(b *testing.B) {
			h := numberIntake(b)
			body := numberBody(size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := cpuTime()
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest("POST", "/triggers/t/amount", bytes.NewReader(body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 202 || !strings.Contains(rec.Body.String(), "filtered") {
					b.Fatalf("got %d %s, want 202 filtered", rec.Code, rec.Body)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// TestFilterNumberCostOverHTTP sends a 1 MiB body of one number to a real
// HTTP server in front of the intake and bounds the CPU the request costs
// the process: before issue 21 it was seconds (big.Float per value).
func TestFilterNumberCostOverHTTP(t *testing.T) {
	srv := httptest.NewServer(numberIntake(t))
	t.Cleanup(srv.Close)
	body := numberBody(1 << 20)
	post := func() {
		resp, err := http.Post(srv.URL+"/triggers/t/amount", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Fatalf("status %d, want 202 filtered", resp.StatusCode)
		}
	}
	post() // warm up the connection and the buffers
	start := cpuTime()
	const n = 5
	for i := 0; i < n; i++ {
		post()
	}
	per := (cpuTime() - start) / n
	t.Logf("1 MiB numeric body through HTTP intake: %.1f ms CPU per request", float64(per)/float64(time.Millisecond))
	// The process's CPU, client included; 50 ms is the target, the bound
	// leaves room for a loaded machine without letting seconds pass.
	if per > 250*time.Millisecond {
		t.Fatalf("%v of CPU per request, want well under 250ms", per)
	}
}
