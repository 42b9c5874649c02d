package tracing

import (
	"context"
	"errors"
	"net/url"
	"regexp"
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
	err = redactURLs(err)
	e.errs.Handle(err)
	return reported{err}
}

// urlInText finds an absolute URL in an error message: the exporter quotes
// the request's URL ("failed to send to https://user:pass@host/v1/traces?
// token=...: 401"), and Go's client a *url.Error's.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// redactedErr is an error whose message has had its URLs' user
// information, query and fragment removed; it unwraps to the original.
type redactedErr struct {
	msg string
	err error
}

func (e *redactedErr) Error() string { return e.msg }
func (e *redactedErr) Unwrap() error { return e.err }

// redactURLs returns err with every URL in its message stripped of what
// may carry a credential (user information, query, fragment), as Endpoint
// logs the endpoint: an OTLP endpoint may hold its collector's token
// there, and export errors are logged and returned to Shutdown's caller.
func redactURLs(err error) error {
	if err == nil {
		return nil
	}
	msg := urlInText.ReplaceAllStringFunc(err.Error(), func(m string) string {
		trimmed := strings.TrimRight(m, ":,;.)]")
		u, perr := url.Parse(trimmed)
		if perr != nil || u.Host == "" {
			return "(url)" + m[len(trimmed):]
		}
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		return u.String() + m[len(trimmed):]
	})
	if msg == err.Error() {
		return err
	}
	return &redactedErr{msg: msg, err: err}
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
	h.log.Warn().Err(redactURLs(err)).Int("errors_since_last_warning", quiet).
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
