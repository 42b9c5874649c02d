package handler

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
)

// ioGrace bounds how long output is awaited after a handler's process
// group is gone: only a process that left the group can still hold a pipe.
const ioGrace = time.Second

// ProcessSpec configures a process handler (SPEC §2.2 kind "process").
type ProcessSpec struct {
	Command string
	Args    []string
	Dir     string            // the working directory, already resolved
	Secrets map[string]string // environment name → resolved value
	// Grants: without "network", the handler runs without network where
	// the host can isolate it (NetworkIsolation), else with the host's:
	// the caller refuses that or warns (server: NetworkIsolationUnavailable).
	Grants  []string
	Timeout time.Duration // per call; 0 means bounded by the caller's context only
	// MaxPayload bounds the input and the output in bytes; 0 means
	// DefaultMaxPayload.
	MaxPayload int64
	Log        zerolog.Logger
}

// processRunner starts one process per call (SPEC §4).
type processRunner struct {
	spec    ProcessSpec
	env     []string
	isolate bool
	redact  func(string) string
	log     zerolog.Logger
	closed  atomic.Bool
}

// NewProcess returns a Runner that starts spec's command for each call.
func NewProcess(spec ProcessSpec) (Runner, error) {
	spec, err := checkProcessSpec(spec)
	if err != nil {
		return nil, err
	}
	p := &processRunner{
		spec:    spec,
		env:     handlerEnv(os.LookupEnv, spec.Secrets),
		isolate: !slices.Contains(spec.Grants, GrantNetwork),
		redact:  redactor(spec.Secrets),
		log:     spec.Log.With().Str("handler", "process").Str("command", spec.Command).Logger(),
	}
	return p, nil
}

// checkProcessSpec refuses a spec no process can be started from and fills
// its defaults; one-shot and persistent runners share it.
func checkProcessSpec(spec ProcessSpec) (ProcessSpec, error) {
	if spec.Command == "" {
		return spec, touba.Errorf(touba.ECONFIG, "process handler: command is empty")
	}
	if spec.Timeout < 0 || spec.MaxPayload < 0 {
		return spec, touba.Errorf(touba.ECONFIG, "process handler: negative timeout or payload limit")
	}
	for name, v := range spec.Secrets {
		if name == "" || strings.ContainsAny(name, "=\x00") || strings.Contains(v, "\x00") {
			return spec, touba.Errorf(touba.ECONFIG, "process handler: secret %q cannot be an environment variable", name)
		}
	}
	orDefault(&spec.MaxPayload, DefaultMaxPayload)
	return spec, nil
}

// Close makes later calls fail without starting a process. Calls in flight
// are bounded by their own context and timeout.
func (p *processRunner) Close() error {
	p.closed.Store(true)
	return nil
}

// Call starts the handler, writes req to its stdin, and reads one response
// from its stdout. See Runner.
func (p *processRunner) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	log := p.log.With().Str("call_id", req.Context.CallID).Str("tool_ref", req.ToolRef).Logger()
	if res := refuseUnsent(req, p.closed.Load(), p.spec.MaxPayload); res != nil {
		return res
	}
	body, err := encodeRequestBody(req, callDeadline(ctx, p.spec.Timeout))
	if err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EINTERNAL, "%v", err))
	}
	if err := context.Cause(ctx); err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerTimeout, "call cancelled before start: %v", err))
	}
	c, err := startChild(p.spec.Command, p.spec.Args, p.spec.Dir, p.env, p.isolate)
	if err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerFailed, "start handler: %v", err))
	}
	defer c.close()
	if err := dispatched(); err != nil {
		c.kill()
		c.reap()
		return fail(req, touba.EffectNotApplied, false, hookError(err))
	}
	res, stderr := p.run(ctx, c, req, body)
	if stderr = strings.TrimSpace(p.redact(stderr)); stderr != "" || res.Err != nil {
		ev := log.Debug()
		if hostFailure(res) {
			ev = log.Warn()
		}
		if res.Err != nil {
			ev = ev.Str("code", res.Err.Code)
		}
		ev.Str("outcome", res.Outcome).Str("stderr", stderr).Msg("handler call")
	}
	return res
}

// run drives one started child to its end: it feeds stdin, reads stdout
// within the payload limit, enforces the timeout, and always leaves the
// process group killed and the child reaped.
func (p *processRunner) run(ctx context.Context, c *child, req *Request, body requestBody) (*Result, string) {
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		_, _ = body.WriteTo(c.stdin) // a handler that exits without reading gets no say here
		_ = c.stdin.Close()
	}()
	outCh := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(c.stdout, p.spec.MaxPayload+1))
		outCh <- b
	}()
	stderr := &tail{limit: stderrLimit}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(stderr, c.stderr)
	}()

	var timeout <-chan time.Time
	if p.spec.Timeout > 0 {
		t := time.NewTimer(p.spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var (
		out                         []byte
		gotOut, exited              bool
		timedOut, cancelled, tooBig bool
		exitCh, done                = c.exited, ctx.Done()
		grace                       <-chan time.Time
	)
	for !gotOut || !exited {
		select {
		case <-exitCh:
			// The handler is done: kill what it left behind in its group,
			// which also closes their copies of stdout.
			exited, exitCh = true, nil
			c.kill()
			if !gotOut {
				grace = time.After(ioGrace)
			}
		case out = <-outCh:
			gotOut = true
			if int64(len(out)) > p.spec.MaxPayload {
				tooBig = true
				c.kill()
			}
		case <-timeout:
			timeout = nil
			if !exited {
				timedOut = true
				c.kill()
			}
		case <-done:
			done = nil
			if !exited {
				cancelled = true
				c.kill()
			}
		case <-grace:
			// A process that left the group still holds stdout open.
			grace = nil
			c.stdout.Close()
		}
	}
	state := c.reap()
	c.stdin.Close()
	<-stdinDone
	select {
	case <-stderrDone:
	case <-time.After(ioGrace):
		c.stderr.Close()
		<-stderrDone
	}

	switch {
	case timedOut:
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
			"handler ran past its timeout of %s; process group killed", p.spec.Timeout)), stderr.String()
	case cancelled:
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
			"call cancelled (%v); process group killed", context.Cause(ctx))), stderr.String()
	case tooBig:
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerPayloadTooLarge,
			"output over max_payload_bytes %d", p.spec.MaxPayload)), stderr.String()
	case state == nil || !state.Success():
		// A handler that answered and then failed on its way out has still
		// answered; without an answer, the failure is the result.
		if _, _, err := parseResponse(out); err == nil {
			return interpret(req, out), stderr.String()
		}
		status := "an unknown status"
		if state != nil {
			status = state.String()
		}
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed,
			"handler exited with %s without a response", status)), stderr.String()
	}
	return interpret(req, out), stderr.String()
}

// hostFailure reports whether a call failed in a way an operator should
// hear about: the handler broke the protocol or did not finish. A business
// error is the handler doing its job.
func hostFailure(res *Result) bool {
	if res.ReceiptErrorCode != "" {
		return true
	}
	if res.Err == nil {
		return false
	}
	switch res.Err.Code {
	case touba.EHandlerTimeout, touba.EHandlerFailed, touba.EHandlerProtocolError,
		touba.EHandlerPayloadTooLarge, touba.EWebhookRejected, touba.EINTERNAL:
		return true
	}
	return false
}
