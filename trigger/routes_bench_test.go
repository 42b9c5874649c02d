package trigger_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/trigger"
)

// routesBenchProgram is scripts/bench-routes' program: a plain trigger
// with one step, an endpoint with 10 routes each taking one type, and an
// endpoint with 10 routes taking everything.
func routesBenchProgram() string {
	var b strings.Builder
	b.WriteString(`{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:bench/One", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:bench/Events", "source": {"kind": "webhook"}, "steps": []},
  {"ref": "trigger:bench/Fanout", "source": {"kind": "webhook"}, "steps": []}`)
	for i := range 10 {
		fmt.Fprintf(&b, `,
  {"ref": "trigger:bench/Type%d", "source": {"kind": "trigger", "trigger": "trigger:bench/Events"},
   "filter": [{"cel": "body.type == 't%d'"}], "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:bench/All%d", "source": {"kind": "trigger", "trigger": "trigger:bench/Fanout"},
   "steps": [{"id": "s", "tool": "tool:x/Y"}]}`, i, i, i)
	}
	b.WriteString("]}")
	return b.String()
}

// BenchmarkIntakeRoutes is one 202 through intake's router onto a real
// queue file (synchronous=FULL, group commit), from 32 concurrent senders,
// with a 1 KiB body whose type cycles through 10: for one trigger, an
// endpoint with 10 routes of which one takes each delivery, and one with
// 10 routes taking all. cpu-us/op is the process's CPU per delivery;
// commits/op the queue's commits (fsyncs) per delivery.
func BenchmarkIntakeRoutes(b *testing.B) {
	p, err := trigger.ParseProgram("program.air.json", []byte(routesBenchProgram()))
	if err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("x", 1000)
	for _, name := range []string{"bench/One", "bench/Events", "bench/Fanout"} {
		b.Run(strings.TrimPrefix(name, "bench/"), func(b *testing.B) {
			q, err := queue.Open(context.Background(), filepath.Join(b.TempDir(), "q.sqlite"), queue.Options{MaxPending: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			in := &trigger.Intake{Queue: q}
			in.SetConfig(&trigger.Config{Program: p})
			h := in.Router(nil)
			var n atomic.Int64
			b.SetParallelism(16)
			start := cpuTime()
			c0 := q.QueueStats().Commits
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					body := `{"type":"t` + strconv.FormatInt(i%10, 10) + `","data":"` + pad + `"}`
					r := httptest.NewRequest(http.MethodPost, "/triggers/"+name, strings.NewReader(body))
					r.Header.Set("X-Touba-Event-Id", "e"+strconv.FormatInt(i, 10))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusAccepted {
						b.Errorf("%d %s", w.Code, w.Body)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-start)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
			b.ReportMetric(float64(q.QueueStats().Commits-c0)/float64(b.N), "commits/op")
		})
	}
}

// BenchmarkSetRoutes is intake's routing decision alone, per delivery, for
// 10 routes of which one takes it (a CEL filter each) and 10 taking all.
func BenchmarkSetRoutes(b *testing.B) {
	p, err := trigger.ParseProgram("program.air.json", []byte(routesBenchProgram()))
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"type":"t3","data":"` + strings.Repeat("x", 1000) + `"}`)
	for _, name := range []string{"bench/Events", "bench/Fanout"} {
		t, _ := p.Lookup(name)
		b.Run(strings.TrimPrefix(name, "bench/"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d := &touba.Delivery{TriggerRef: t.Ref, EventID: "e", Body: body, Headers: map[string]string{"content-type": "application/json"},
					ReceivedAt: time.Now()}
				if err := t.SetRoutes(d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
