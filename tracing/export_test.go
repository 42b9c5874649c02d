package tracing_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/tracing"
)

// TestSetupRefusesAnotherProtocol: grpc (or any protocol but
// http/protobuf) refuses start-up with ConfigInvalid, instead of POSTing
// protobuf to a gRPC port and failing every batch.
func TestSetupRefusesAnotherProtocol(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		for _, p := range []string{"grpc", "http/json"} {
			unsetOTEL(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
			t.Setenv(v, p)
			_, err := tracing.Setup(context.Background(), "test", zerolog.Nop())
			if touba.ErrorCode(err) != touba.ECONFIG || !strings.Contains(err.Error(), p) {
				t.Fatalf("%s=%s: err %v, want ConfigInvalid naming it", v, p, err)
			}
		}
	}
	unsetOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tr, err := tracing.Setup(context.Background(), "test", zerolog.Nop())
	if err != nil || !tr.Enabled() {
		t.Fatalf("http/protobuf: enabled=%v err=%v", tr.Enabled(), err)
	}
	_ = tr.Shutdown(time.Second)
}

func TestEndpointIsLoggedWithoutCredentials(t *testing.T) {
	for _, c := range []struct{ base, traces, want string }{
		{"http://collector:4318", "", "http://collector:4318/v1/traces"},
		{"http://collector:4318/", "", "http://collector:4318/v1/traces"},
		{"", "https://user:pw@otel.example/v1/traces?api_key=k", "https://otel.example/v1/traces"},
		{"http://a:4318", "http://b:4318/custom", "http://b:4318/custom"},
		{"", "", ""},
	} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": c.base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": c.traces}
		if got := tracing.Endpoint(func(k string) string { return env[k] }); got != c.want {
			t.Errorf("Endpoint(%q, %q) = %q, want %q", c.base, c.traces, got, c.want)
		}
	}

	unsetOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://user:secret@127.0.0.1:4318/v1/traces")
	var buf bytes.Buffer
	tr, err := tracing.Setup(context.Background(), "test", zerolog.New(&buf))
	if err != nil {
		t.Fatal(err)
	}
	_ = tr.Shutdown(time.Second)
	if !strings.Contains(buf.String(), `"endpoint":"http://127.0.0.1:4318/v1/traces"`) || strings.Contains(buf.String(), "secret") {
		t.Fatalf("start-up line: %s", buf.String())
	}
}

// TestRefusedSpansAreCounted: a collector that refuses every batch; the
// spans are counted as dropped and the warning is written once.
func TestRefusedSpansAreCounted(t *testing.T) {
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "no", http.StatusBadRequest) // not retried by the exporter
	}))
	defer collector.Close()
	unsetOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.URL+"/v1/traces")
	var buf syncBuffer
	tr, err := tracing.Setup(context.Background(), "test", zerolog.New(&buf))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, span := tr.Tracer().Start(context.Background(), "x")
		span.End()
		if err := tr.ForceFlush(5 * time.Second); err == nil {
			t.Fatalf("flush %d to a refusing collector succeeded", i)
		}
	}
	if got := tr.DroppedSpans(); got != 3 || posts.Load() != 3 {
		t.Fatalf("dropped %d spans in %d posts, want 3 in 3", got, posts.Load())
	}
	_ = tr.Shutdown(time.Second)
	if n := strings.Count(buf.String(), "trace export failed"); n != 1 {
		t.Fatalf("%d warnings for 3 failed batches in a second, want 1:\n%s", n, buf.String())
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
