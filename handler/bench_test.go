package handler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

func BenchmarkProcessCall(b *testing.B) {
	// "isolated" starts each handler in a fresh network namespace where the
	// host allows it; "helper" does it through the isolation helper, as a
	// daemon that is not root does (Linux); "network" is granted the
	// network and skips that.
	for _, bb := range []struct {
		name   string
		grants []string
	}{{"isolated", nil}, {"helper", nil}, {"network", []string{handler.GrantNetwork}}} {
		b.Run(bb.name, func(b *testing.B) {
			if bb.name == "helper" {
				useIsolationHelper(b)
			}
			r := mustProcess(b, func(s *handler.ProcessSpec) { s.Timeout = 10 * time.Second; s.Grants = bb.grants }, "echo")
			req := newRequest(b, `{"order_id":42,"lines":[{"sku":"A-1","qty":2}]}`, touba.RetryIdempotencyKey)
			for b.Loop() {
				if res := r.Call(context.Background(), req, func() error { return nil }); !res.OK {
					b.Fatalf("result = %+v %v", res, res.Err)
				}
			}
		})
	}
}

func BenchmarkAccountingStub(b *testing.B) {
	s := handler.NewAccountingStub()
	req := newRequest(b, `{"order_id":42}`, touba.RetryIdempotencyKey)
	for b.Loop() {
		if res := s.Call(context.Background(), req, func() error { return nil }); !res.OK {
			b.Fatal(res.Err)
		}
	}
}

// BenchmarkFingerprint: an order, and the 1 KiB body of the benchmarks'
// webhooks (scripts/bench-e2e), where the long string dominates.
func BenchmarkFingerprint(b *testing.B) {
	for _, c := range []struct{ name, input string }{
		{"order", `{"request":{"order_id":"A-42","customer":{"name":"Zoë","email":"z@example.com"},` +
			`"lines":[{"sku":"A-1","qty":2,"price":12.50},{"sku":"B-7","qty":1,"price":3.0}]},"existing":null}`},
		{"1KiB", `{"body":{"data":"` + strings.Repeat("x", 1013) + `"}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.input)))
			for b.Loop() {
				if _, err := handler.Fingerprint("tool:examples.orders/CreateOrder", "invoke", json.RawMessage(c.input)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPersistentCall measures the persistent runner alone: calls a
// second through one Go SDK handler process, 64 calls in flight.
func BenchmarkPersistentCall(b *testing.B) {
	r := mustPersistent(b, sdkecho, func(s *handler.ProcessSpec, o *handler.PersistentOptions) {
		s.Grants, o.MaxInFlight = []string{handler.GrantNetwork}, 64
	})
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("call-%d", n.Add(1))
			req := preq(b, id, map[string]any{"order_id": 42, "lines": []map[string]any{{"sku": "A-1", "qty": 2}}}, true)
			if res := r.Call(context.Background(), req, func() error { return nil }); !res.OK {
				b.Fatalf("result = %+v %v", res, res.Err)
			}
		}
	})
}

// BenchmarkDescribe: what the dispatcher adds to each webhook or http
// effect to record its request (Describe), and a whole http call on
// loopback beside it, with the 1 KiB body of the benchmarks' webhooks.
func BenchmarkDescribe(b *testing.B) {
	input := `{"order":{"id":"A-42"},"pad":"` + strings.Repeat("x", 1000) + `"}`
	api := newAPI(b, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	runners := map[string]handler.Runner{
		"webhook": mustWebhook(b, api.URL+"/hook", nil),
		"http":    mustHTTP(b, api.URL+"/orders/{/order/id}", nil),
	}
	for _, name := range []string{"webhook", "http"} {
		r := runners[name]
		req := newRequest(b, input, touba.RetryIdempotencyKey)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.(handler.Describer).Describe(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("http-call", func(b *testing.B) {
		req := newRequest(b, input, touba.RetryIdempotencyKey)
		b.ReportAllocs()
		for b.Loop() {
			if res := runners["http"].Call(context.Background(), req, func() error { return nil }); !res.OK {
				b.Fatal(res.Err)
			}
		}
	})
}
