package tracing

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	touba "github.com/touba/touba-trigger"
)

// warnEvery is how often a failing exporter may write a line: a collector
// that is down fails every batch, and one warning a batch buries the log.
const warnEvery = time.Minute

// protocol returns the OTLP protocol the environment asks for traces; the
// traces-specific variable wins, as the SDK specification says.
func protocol(getenv func(string) string) string {
	if p := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")); p != "" {
		return p
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
}

// checkProtocol refuses a protocol the daemon does not speak. Only
// OTLP/HTTP with protobuf is built in; the Go SDK's HTTP exporter would
// otherwise POST protobuf to a gRPC port (4317) and fail every batch.
func checkProtocol(getenv func(string) string) error {
	switch p := protocol(getenv); p {
	case "", "http/protobuf":
		return nil
	default:
		return touba.Errorf(touba.ECONFIG, "OTEL_EXPORTER_OTLP_PROTOCOL %q: this daemon exports traces over http/protobuf only; "+
			"set it to http/protobuf (or unset it) and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318 by default)", p)
	}
}

// Endpoint is where spans are sent, as the SDK resolves it from getenv
// (the traces endpoint as given, else the base endpoint plus /v1/traces),
// with any user information and query left out: it is logged at start.
func Endpoint(getenv func(string) string) string {
	raw := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if raw == "" {
		base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
		if base == "" {
			return ""
		}
		raw = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable endpoint)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// exporter counts the spans of every batch it failed to export (the SDK
// drops them) and reports the failure to errs itself: the batch processor
// hands the error to otel.Handle when its timer exported, but returns it
// without a word from ForceFlush and Shutdown.
type exporter struct {
	sdktrace.SpanExporter
	dropped *atomic.Uint64
	errs    *errorHandler
}

func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	e.dropped.Add(uint64(len(spans)))
	e.errs.Handle(err)
	return reported{err}
}

// reported is an export error already given to the errorHandler, which the
// SDK may hand it again through otel.Handle.
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

// errorHandler is the SDK's error handler: one "trace export failed" line
// per warnEvery at most, saying how many errors the quiet time held and
// how many spans were dropped in all. After Shutdown it writes nothing:
// the shutdown's own error is returned to the caller, logged once there.
type errorHandler struct {
	log     zerolog.Logger
	now     func() time.Time
	dropped *atomic.Uint64
	closed  atomic.Bool

	mu    sync.Mutex
	last  time.Time
	quiet int // errors not logged since the last line
}

func (h *errorHandler) Handle(err error) {
	var again reported
	if h.closed.Load() || errors.As(err, &again) {
		return
	}
	h.mu.Lock()
	now := h.now()
	if !h.last.IsZero() && now.Sub(h.last) < warnEvery {
		h.quiet++
		h.mu.Unlock()
		return
	}
	quiet := h.quiet
	h.last, h.quiet = now, 0
	h.mu.Unlock()
	h.log.Warn().Err(err).Int("errors_since_last_warning", quiet).
		Uint64("spans_dropped_total", h.dropped.Load()).Msg("trace export failed")
}

// DroppedSpans is how many spans the exporter failed to send since start.
func (t *Tracing) DroppedSpans() uint64 {
	if t == nil || t.dropped == nil {
		return 0
	}
	return t.dropped.Load()
}

// ForceFlush exports the spans queued so far, within timeout.
func (t *Tracing) ForceFlush(timeout time.Duration) error {
	if !t.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return t.sdk.ForceFlush(ctx)
}
