package handler

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
)

// ModeEnv is the environment variable that asks a handler for the
// persistent mode of SPEC §4.1; the host sets it to "persistent".
const ModeEnv = "TOUBA_HANDLER_MODE"

// Defaults of PersistentOptions, the manifest's (SPEC §4.1).
const (
	DefaultMaxInFlight = 16
	DefaultMaxCalls    = 100000
	DefaultIdleTimeout = time.Minute
)

// PersistentOptions bound a persistent process handler (SPEC §4.1).
type PersistentOptions struct {
	// MaxInFlight is how many calls of the binding may be outstanding at
	// once; others wait for a free slot, bounded by their context.
	MaxInFlight int
	// MaxCalls is how many requests one process is sent before its stdin
	// is closed and the next call starts a new process.
	MaxCalls int
	// IdleTimeout is how long a process may go without a call in flight
	// before its stdin is closed.
	IdleTimeout time.Duration
}

// persistentRunner keeps one long-lived handler process per binding and
// multiplexes calls over its stdin and stdout (SPEC §4.1). See
// PERSISTENT.md for why it is one process and not a pool.
type persistentRunner struct {
	spec    ProcessSpec
	opts    PersistentOptions
	env     []string
	isolate bool
	redact  func(string) string
	log     zerolog.Logger
	slots   chan struct{}  // one token per outstanding call
	procs   sync.WaitGroup // processes not yet ended

	mu     sync.Mutex
	cur    *proc // the process new calls go to; nil when none
	closed bool
}

// NewPersistent returns a Runner that serves every call of spec's binding
// from one long-lived process, started on demand with ModeEnv=persistent
// added to the environment a one-shot handler gets. Zero options take the
// defaults.
func NewPersistent(spec ProcessSpec, opts PersistentOptions) (Runner, error) {
	spec, err := checkProcessSpec(spec)
	if err != nil {
		return nil, err
	}
	if _, ok := spec.Secrets[ModeEnv]; ok {
		return nil, touba.Errorf(touba.ECONFIG, "process handler: secret %q is the host's own variable", ModeEnv)
	}
	if opts.MaxInFlight < 0 || opts.MaxCalls < 0 || opts.IdleTimeout < 0 {
		return nil, touba.Errorf(touba.ECONFIG, "persistent handler: negative max_in_flight, max_calls or idle_timeout")
	}
	orDefault(&opts.MaxInFlight, DefaultMaxInFlight)
	orDefault(&opts.MaxCalls, DefaultMaxCalls)
	orDefault(&opts.IdleTimeout, DefaultIdleTimeout)
	r := &persistentRunner{
		spec:    spec,
		opts:    opts,
		env:     append(handlerEnv(os.LookupEnv, spec.Secrets), ModeEnv+"=persistent"),
		isolate: !slices.Contains(spec.Grants, GrantNetwork),
		redact:  redactor(spec.Secrets),
		log:     spec.Log.With().Str("handler", "persistent").Str("command", spec.Command).Logger(),
		slots:   make(chan struct{}, opts.MaxInFlight),
	}
	return r, nil
}

// Close makes later calls fail without being sent and closes the stdin of
// the current process, which exits once it has answered the calls in
// flight (each bounded by its own context and timeout).
func (r *persistentRunner) Close() error {
	r.mu.Lock()
	r.closed = true
	p := r.cur
	r.cur = nil
	r.mu.Unlock()
	if p != nil {
		p.retire()
	}
	return nil
}

// wait waits until every process the runner started has ended.
func (r *persistentRunner) wait() { r.procs.Wait() }

// Call sends req to the binding's process, starting one if none is
// serving, and waits for the response carrying req's call id. See Runner.
func (r *persistentRunner) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	// Closed is answered later, where the process is taken.
	if res := refuseUnsent(req, false, r.spec.MaxPayload); res != nil {
		return res
	}
	if req.Context.CallID == "" {
		// Answers are matched by call id; without one nothing could match.
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EINTERNAL, "persistent handler call without a call_id"))
	}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerTimeout,
			"call cancelled while waiting for one of max_in_flight %d slots: %v", r.opts.MaxInFlight, context.Cause(ctx)))
	}
	defer func() { <-r.slots }()

	// The deadline the handler sees starts now, not before the wait.
	body, err := encodeRequest(req, callDeadline(ctx, r.spec.Timeout))
	if err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EINTERNAL, "%v", err))
	}
	if err := context.Cause(ctx); err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerTimeout, "call cancelled before start: %v", err))
	}
	p, rerr := r.reserve()
	if rerr != nil {
		return fail(req, touba.EffectNotApplied, false, rerr)
	}
	if err := dispatched(); err != nil {
		p.unreserve()
		return fail(req, touba.EffectNotApplied, false, hookError(err))
	}
	c := &pcall{req: req, done: make(chan *Result, 1)}
	if err := p.register(c); err != nil {
		return fail(req, touba.EffectNotApplied, false, err)
	}
	// A timeout or a cancellation ends the whole process, and with it
	// every call in flight there; this call's answer then comes from the
	// process's end like theirs. Both are armed before the write, which a
	// handler that stops reading could block.
	if r.spec.Timeout > 0 {
		t := time.AfterFunc(r.spec.Timeout, func() {
			p.expire(c, touba.Errorf(touba.EHandlerTimeout,
				"call %s ran past its timeout of %s; handler process group killed", req.Context.CallID, r.spec.Timeout))
		})
		defer t.Stop()
	}
	stop := context.AfterFunc(ctx, func() {
		p.expire(c, touba.Errorf(touba.EHandlerTimeout,
			"call %s cancelled (%v); handler process group killed", req.Context.CallID, context.Cause(ctx)))
	})
	defer stop()
	p.write(c, body)
	res := <-c.done
	if hostFailure(res) {
		ev := r.log.Warn().Str("call_id", req.Context.CallID).Int("pid", p.pid).Str("outcome", res.Outcome)
		if res.Err != nil {
			ev = ev.Str("code", res.Err.Code).Str("reason", r.redact(res.Err.Message))
		}
		ev.Str("receipt_error", res.ReceiptErrorCode).Msg("handler call")
	}
	return res
}

// reserve returns the process the next request goes to, starting one when
// none is serving, and counts the request against its max_calls.
func (r *persistentRunner) reserve() (*proc, *touba.Error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, touba.Errorf(touba.EHandlerFailed, "handler runner is closed")
	}
	if r.cur != nil && !r.cur.take(r.opts.MaxCalls) {
		r.cur = nil
	}
	p := r.cur
	if p == nil {
		var err error
		if p, err = r.start(); err != nil {
			return nil, touba.Errorf(touba.EHandlerFailed, "start handler: %v", err)
		}
		p.take(r.opts.MaxCalls)
		r.cur = p
	}
	if p.draining() {
		r.cur = nil // that was its last request
	}
	return p, nil
}

// forget stops sending new calls to p, which is ending.
func (r *persistentRunner) forget(p *proc) {
	r.mu.Lock()
	if r.cur == p {
		r.cur = nil
	}
	r.mu.Unlock()
}

// crashError is what the calls in flight on a process that exited by
// itself end with.
func crashError(pid int, status string, unanswered int) *touba.Error {
	return touba.Errorf(touba.EHandlerFailed, "handler process %d exited with %s with %d call(s) unanswered",
		pid, strings.TrimSpace(status), unanswered)
}
