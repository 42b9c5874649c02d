package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Workers that connect out (SPEC §4.3): a binding of kind worker has no
// address; its calls wait in the daemon until a worker takes them over
// POST /workers/v1/take and answers over POST /workers/v1/answer, with
// the binding's token. Connect runs such a worker over the same Tool
// definitions Main and HTTPHandler serve.

// Defaults of a Worker.
const (
	DefaultMaxInFlight = 16
	DefaultTakeWait    = 30 * time.Second
	maxBackoff         = 30 * time.Second
	firstBackoff       = 200 * time.Millisecond
)

// ErrWorkerRefused is returned by Worker.Run when the daemon refuses the
// worker's token (401) or a tool it names (403): retrying cannot help.
var ErrWorkerRefused = errors.New("handler: the daemon refused the worker")

// ErrNoAnswer, returned by a Tool's Run in a Worker, sends no answer:
// the call then ends as a timeout in the daemon, unknown for an external
// write (SPEC §4.3), which is what a worker that cannot tell whether the
// write happened should say. Elsewhere it is an error like any other.
var ErrNoAnswer = errors.New("handler: no answer")

// Worker serves Tools to a daemon it connects out to.
type Worker struct {
	// URL is the daemon's base URL (its --listen address), such as
	// "https://touba.example.com".
	URL string
	// Token is the worker binding's token (Authorization: Bearer).
	Token string
	Tools []Tool
	// MaxInFlight bounds the calls run at once (DefaultMaxInFlight when 0).
	MaxInFlight int
	// Ahead is how many calls the worker takes before it has room to run
	// them, so that the next calls are in hand when one ends and the
	// daemon prepares the next ones meanwhile. They start in the order
	// taken; their timeout runs from the take, and a worker that dies
	// leaves them unknown like the calls it was running. 0 takes
	// MaxInFlight ahead, none when MaxInFlight is 1: the daemon hands out
	// in acceptance order the calls waiting when a take comes, but two
	// runs leased at once for a take's room reach it in either order, so
	// only a worker that asks for one call at a time gets them strictly
	// in order. A negative Ahead takes none (for calls that run close to
	// their timeout, or tools under reconcile or none, which a dead
	// worker's calls park).
	Ahead int
	// TakeWait is how long one take long-polls (DefaultTakeWait when 0;
	// the daemon allows at most 60 s).
	TakeWait time.Duration
	// Client makes the requests (when nil, a client without a timeout that
	// keeps a connection open for each call in flight and the take: takes
	// long-poll, and each request is bounded by its context).
	Client *http.Client
	// Logf receives the worker's news: connected, disconnected and the
	// wait before the next try, answers refused. Nil: the standard logger.
	Logf func(format string, args ...any)
	// OnCall, when set, is called after each call is answered, with its
	// request, response document and how long it ran: for a summary line.
	OnCall func(req json.RawMessage, resp []byte, took time.Duration)
}

// Connect runs a worker of tools against the daemon at url with token
// until ctx ends: it takes calls (as many again ahead, Worker.Ahead),
// runs at most DefaultMaxInFlight at once in the order taken, answers
// them, and reconnects with backoff when the daemon cannot be reached.
// When ctx ends it takes no more calls, finishes and answers those in
// hand, and returns nil.
func Connect(ctx context.Context, url, token string, tools ...Tool) error {
	return (&Worker{URL: url, Token: token, Tools: tools}).Run(ctx)
}

// Run is Connect with w's settings.
func (w *Worker) Run(ctx context.Context) error {
	tools := map[string]*Tool{}
	var refs []string
	for i := range w.Tools {
		t := &w.Tools[i]
		if err := t.validate(); err != nil {
			return err
		}
		if tools[t.Ref] == nil {
			refs = append(refs, t.Ref)
		}
		tools[t.Ref] = t
	}
	if len(refs) == 0 {
		return errors.New("handler: a worker needs at least one tool")
	}
	n := w.MaxInFlight
	if n <= 0 {
		n = DefaultMaxInFlight
	}
	ahead := w.Ahead
	if ahead == 0 && n > 1 {
		ahead = n
	}
	ahead = max(ahead, 0)
	c := &conn{w: w, base: strings.TrimRight(w.URL, "/"), refs: refs, tools: tools,
		slots: make(chan struct{}, n+ahead), queue: make(chan json.RawMessage, n+ahead)}
	if c.w.Client == nil {
		// A call's answer is a request of its own, up to n at once: the
		// default transport keeps 2 idle connections to a host, so most
		// answers paid a new TCP connection.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = n + 1
		c.w.Client = &http.Client{Transport: t}
	}
	for range n {
		c.running.Add(1)
		go c.runner(ctx)
	}
	err := c.loop(ctx)
	close(c.queue)
	c.running.Wait()
	return err
}

// conn is one Worker.Run's state.
type conn struct {
	w       *Worker
	base    string
	refs    []string
	tools   map[string]*Tool
	slots   chan struct{}        // one per call in hand: taken, not yet answered
	queue   chan json.RawMessage // calls taken, for the runners in that order
	running sync.WaitGroup       // the runners
	down    bool                 // the last take failed: say so when one succeeds
}

func (c *conn) logf(format string, args ...any) {
	if c.w.Logf != nil {
		c.w.Logf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// loop takes calls while ctx lasts.
func (c *conn) loop(ctx context.Context) error {
	backoff := firstBackoff
	for {
		// Wait for room for at least one call, then ask for as many as
		// there is room for.
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		room := 1
		for room < cap(c.slots) {
			select {
			case c.slots <- struct{}{}:
				room++
				continue
			default:
			}
			break
		}
		calls, err := c.take(ctx, room)
		for range room - len(calls) {
			<-c.slots
		}
		if ctx.Err() != nil && err != nil {
			return nil
		}
		if errors.Is(err, ErrWorkerRefused) {
			return err
		}
		if err != nil {
			wait := backoff/2 + rand.N(backoff/2+1)
			c.logf("touba worker: cannot reach %s: %v; retrying in %s", c.base, err, wait.Round(time.Millisecond))
			c.down = true
			// The take may have died with its connection (a black hole
			// keeps it open to the end of the take's bound): the next
			// try dials anew rather than take an idle one leading nowhere.
			c.w.Client.CloseIdleConnections()
			backoff = min(backoff*2, maxBackoff)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		if c.down {
			c.down = false
			c.logf("touba worker: connected to %s again", c.base)
		}
		backoff = firstBackoff
		for _, raw := range calls {
			c.queue <- raw // room for it: it holds a slot
		}
	}
}

// take asks for up to n calls.
func (c *conn) take(ctx context.Context, n int) ([]json.RawMessage, error) {
	wait := c.w.TakeWait
	if wait <= 0 {
		wait = DefaultTakeWait
	}
	body, _ := json.Marshal(map[string]any{"tools": c.refs, "max": n, "wait_ms": wait.Milliseconds()})
	tctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	resp, err := c.post(tctx, "/workers/v1/take", body)
	if err != nil {
		return nil, err
	}
	var got struct {
		Calls []json.RawMessage `json:"calls"`
	}
	if err := json.Unmarshal(resp, &got); err != nil {
		return nil, fmt.Errorf("take answer: %w", err)
	}
	return got.Calls, nil
}

// runner serves calls one after another, in the order taken, until the
// queue is closed and drained: a clean stop finishes the calls in hand,
// those taken ahead included.
func (c *conn) runner(ctx context.Context) {
	defer c.running.Done()
	for raw := range c.queue {
		c.serve(ctx, raw)
		<-c.slots
	}
}

// serve runs one call and answers it. The call runs to its end even when
// the worker is stopping; its deadline is the request's. A call taken
// ahead whose deadline passed before it could start is not run: the
// daemon has ended it (unknown) already, and may hand it to another worker.
func (c *conn) serve(ctx context.Context, raw json.RawMessage) {
	start := time.Now()
	var head struct {
		ToolRef string `json:"tool_ref"`
		Context struct {
			CallID         string `json:"call_id"`
			DeadlineUnixMS int64  `json:"deadline_unix_ms"`
		} `json:"context"`
	}
	_ = json.Unmarshal(raw, &head)
	if d := head.Context.DeadlineUnixMS; d > 0 && !start.Before(time.UnixMilli(d)) {
		c.logf("touba worker: call %s was past its deadline before it could start; not run", head.Context.CallID)
		return
	}
	t := c.tools[head.ToolRef]
	if t == nil {
		t = &Tool{Ref: c.refs[0], Run: func(context.Context, *Call) (*Result, error) { return nil, nil }}
	}
	skip := false
	tc := *t
	tc.Run = func(ctx context.Context, call *Call) (*Result, error) {
		r, err := t.Run(ctx, call)
		skip = errors.Is(err, ErrNoAnswer)
		return r, err
	}
	resp := tc.handle(context.WithoutCancel(ctx), raw, true)
	if !skip {
		c.answer(raw, resp)
	}
	if c.w.OnCall != nil {
		c.w.OnCall(raw, resp, time.Since(start))
	}
}

// answer posts resp, retrying while the daemon cannot be reached and the
// call's deadline has not passed; the daemon refusing it (409: the call
// timed out meanwhile) is logged.
func (c *conn) answer(req json.RawMessage, resp []byte) {
	var rc struct {
		Context struct {
			CallID         string `json:"call_id"`
			DeadlineUnixMS int64  `json:"deadline_unix_ms"`
		} `json:"context"`
	}
	_ = json.Unmarshal(req, &rc)
	deadline := time.Now().Add(time.Minute)
	if rc.Context.DeadlineUnixMS > 0 {
		deadline = time.UnixMilli(rc.Context.DeadlineUnixMS)
	}
	backoff := firstBackoff
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(5*time.Second))
		_, err := c.post(ctx, "/workers/v1/answer", resp)
		cancel()
		var se *statusError
		switch {
		case err == nil:
			return
		case errors.As(err, &se) && se.status < 500 && se.status != http.StatusTooManyRequests:
			c.logf("touba worker: answer to call %s refused: %v", rc.Context.CallID, err)
			return
		case time.Now().After(deadline):
			c.logf("touba worker: cannot answer call %s before its deadline: %v", rc.Context.CallID, err)
			return
		}
		time.Sleep(backoff) // the daemon is unreachable: wait before the next try
		backoff = min(backoff*2, 5*time.Second)
	}
}
