package trigger

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/httpjson"
	"github.com/touba/touba-trigger/internal/secret"
)

// Enqueuer stores accepted deliveries; *queue.Queue is one.
type Enqueuer interface {
	Enqueue(ctx context.Context, d *touba.Delivery) (touba.EnqueueResult, error)
}

// DeliveryLog records requests that did not create an entry; *state.State
// is one. Log must not block.
type DeliveryLog interface {
	Log(d *touba.LoggedDelivery)
}

// Verifier checks a request's signature; *verify.Verifier is one.
type Verifier interface {
	Verify(h http.Header, body []byte, at time.Time) error
}

// Config is what intake serves: a program and the verifiers of its
// triggers (by trigger name). It is swapped whole on reload.
type Config struct {
	Program   *Program
	Verifiers map[string]Verifier
	Secrets   *secret.Set // header values holding one are not kept

	limits map[string]*limiter // rate limits by trigger ref, set by SetConfig
}

// Intake is the HTTP ingestion handler of SPEC §3.1.
type Intake struct {
	Queue Enqueuer
	Log   DeliveryLog
	Now   func() time.Time
	// Enqueued, when set, is called after each new entry (to wake the
	// dispatcher); it must not block.
	Enqueued func()
	// Gathered, when set, sees each new entry that a debounce or batch
	// gathered (res.Gather set): for metrics, and to tell the dispatcher's
	// wake loop when a gathering this intake opened starts. It must not
	// block.
	Gathered func(triggerRef string, res touba.EnqueueResult)
	// Observe, when set, sees every answer (for metrics).
	Observe func(triggerRef, code string, status int)
	Logger  zerolog.Logger
	// TrustedProxies are the peers whose X-Forwarded-For is believed
	// (--trusted-proxies); set before serving.
	TrustedProxies []netip.Prefix

	config    atomic.Pointer[Config]
	draining  atomic.Bool
	lingering atomic.Int32 // 413s discarding the rest of their body (intake_linger.go)
}

// SetConfig installs the program to serve; safe while serving. Rate
// limit buckets of triggers whose limit did not change are carried over
// from the configuration served until now.
func (in *Intake) SetConfig(c *Config) {
	var old map[string]*limiter
	if prev := in.config.Load(); prev != nil {
		old = prev.limits
	}
	c.limits = limiters(c.Program, old)
	in.config.Store(c)
}

// Drain makes every new request answer 503 from now on.
func (in *Intake) Drain() { in.draining.Store(true) }

// Draining reports whether Drain was called.
func (in *Intake) Draining() bool { return in.draining.Load() }

func (in *Intake) now() time.Time {
	if in.Now != nil {
		return in.Now()
	}
	return time.Now()
}

// retryAfterSec is the Retry-After of every 503: long enough for a commit
// backlog or a restart, short enough that senders come back promptly.
const retryAfterSec = 5

type answer struct {
	QueueID string `json:"queue_id"`
	Status  string `json:"status"`
	Code    string `json:"code,omitempty"` // TriggerReplayRejected with status consumed
}

func writeError(w http.ResponseWriter, code, message, queueID string) int {
	status := touba.HTTPStatus(code)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSec))
	}
	httpjson.Error(w, status, code, message, queueID)
	return status
}
