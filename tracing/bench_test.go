package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protowire"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/tracing"
	"github.com/touba/touba-trigger/trigger"
)

// memQueue is an Enqueuer without storage: the benchmark measures what
// tracing adds to intake, not SQLite, whose cost is the same either way.
type memQueue struct{ n atomic.Int64 }

func (q *memQueue) Enqueue(_ context.Context, d *touba.Delivery) (touba.EnqueueResult, error) {
	id := "q" + strconv.FormatInt(q.n.Add(1), 10)
	return touba.EnqueueResult{QueueID: id, Created: true, Digest: d.Digest, Status: "pending"}, nil
}

type nopLog struct{}

func (nopLog) Log(*touba.LoggedDelivery) {}

// sink is an OTLP/HTTP receiver that counts the spans it is sent without
// decoding them (a wire-format walk), so that its own CPU, which this
// process's rusage includes, stays small beside the exporter's.
type sink struct{ spans atomic.Int64 }

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.spans.Add(int64(countSpans(b, 0)))
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// countSpans counts the spans of an ExportTraceServiceRequest: field 1
// resource_spans, then 2 scope_spans, then 2 spans.
func countSpans(b []byte, depth int) int {
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		if typ != protowire.BytesType {
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return n
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		switch {
		case depth == 0 && num == 1, depth == 1 && num == 2:
			n += countSpans(v, depth+1)
		case depth == 2 && num == 2:
			n++
		}
	}
	return n
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIntake is one 202 through the daemon's HTTP handler (tracing
// middleware, router, intake with a 1 KiB body) with tracing off and on at
// full sampling, exporting over OTLP/HTTP to an in-process sink, as
// tracing.Setup configures it from OTEL_* variables. cpu-ns/op is the whole
// process's CPU time per request (getrusage), the exporter's background
// work included and flushed before it is read: with other programs sharing
// the machine it moves less than ns/op. exported/op shows no span was
// dropped (the batch processor drops spans when its queue is full).
func BenchmarkIntake(b *testing.B) {
	body := `{"data":"` + strings.Repeat("x", 1013) + `"}`
	for _, c := range []struct {
		name   string
		on     bool
		parent string
	}{{"off", false, ""}, {"on", true, ""}, {"on-traceparent", true, parent}} {
		b.Run(c.name, func(b *testing.B) {
			sk := &sink{}
			srv := httptest.NewServer(sk)
			defer srv.Close()
			if c.on {
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
				b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
			} else {
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
				b.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			}
			tr, err := tracing.Setup(context.Background(), "bench", zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			p, err := trigger.ParseProgram("program.air.json", []byte(`{"air_version": "touba-air-v1", "triggers": [
				{"ref": "trigger:bench/Ingest", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]}]}`))
			if err != nil {
				b.Fatal(err)
			}
			// Warnings only, like the benchmark's intake-only daemon.
			log := zerolog.New(io.Discard).Level(zerolog.WarnLevel).Hook(tracing.LogHook{})
			in := &trigger.Intake{Queue: &memQueue{}, Log: nopLog{}, Logger: log}
			in.SetConfig(&trigger.Config{Program: p})
			h := tr.Middleware(in.Router(nil))
			var i int
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				i++
				r := httptest.NewRequest(http.MethodPost, "/triggers/bench/Ingest", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("X-Touba-Event-Id", "e"+strconv.Itoa(i))
				if c.parent != "" {
					r.Header.Set("Traceparent", c.parent)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusAccepted {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			if err := tr.Shutdown(10 * time.Second); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(i), "cpu-ns/op")
			if c.on {
				b.ReportMetric(float64(sk.spans.Load())/float64(i), "exported/op")
			}
		})
	}
}
