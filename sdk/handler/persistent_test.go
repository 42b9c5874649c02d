package handler_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

// session is a ServePersistent running on in-memory pipes.
type session struct {
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
}

// startPersistent runs ServePersistent in the background; the test writes
// request lines with send and reads response lines with next.
func startPersistent(tb testing.TB, ctx context.Context, tool handler.Tool) *session {
	tb.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &session{in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		err := handler.ServePersistent(ctx, tool, inR, outW)
		outW.CloseWithError(io.EOF)
		s.done <- err
	}()
	tb.Cleanup(func() {
		inW.Close()
		outR.Close()
	})
	return s
}

func (s *session) send(tb testing.TB, request map[string]any) {
	tb.Helper()
	if _, err := s.in.Write(append(mustJSON(tb, request), '\n')); err != nil {
		tb.Fatalf("write request: %v", err)
	}
}

// next reads one response line, failing the test after a deadline.
func (s *session) next(tb testing.TB) response {
	tb.Helper()
	type read struct {
		line []byte
		err  error
	}
	ch := make(chan read, 1)
	go func() {
		line, err := s.out.ReadBytes('\n')
		ch <- read{line, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			tb.Fatalf("read response: %v", r.err)
		}
		resp := parseLine(tb, r.line)
		if resp.CallID == nil {
			tb.Fatalf("persistent response %s has no call_id", r.line)
		}
		return resp
	case <-time.After(10 * time.Second):
		tb.Fatalf("no response within 10s")
		return response{}
	}
}

// wait returns what ServePersistent returned, failing after a deadline.
func (s *session) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(10 * time.Second):
		tb.Fatalf("ServePersistent did not return within 10s")
		return nil
	}
}

// gatedRun is a Run that reports each call as started and then waits for
// the test to release it by call_id.
type gatedRun struct {
	started chan string
	mu      sync.Mutex
	release map[string]chan struct{}
}

func newGatedRun(ids ...string) *gatedRun {
	g := &gatedRun{started: make(chan string, len(ids)), release: map[string]chan struct{}{}}
	for _, id := range ids {
		g.release[id] = make(chan struct{})
	}
	return g
}

func (g *gatedRun) run(ctx context.Context, c *handler.Call) (*handler.Result, error) {
	g.mu.Lock()
	ch := g.release[c.Context.CallID]
	g.mu.Unlock()
	g.started <- c.Context.CallID
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, handler.Errorf("Cancelled", "cancelled")
	}
	return handler.Output(c.Context.CallID).WithReceipt(c.Receipt(handler.Applied, "ref:"+c.Context.CallID)), nil
}

func (g *gatedRun) awaitStarted(tb testing.TB, n int) {
	tb.Helper()
	for range n {
		select {
		case <-g.started:
		case <-time.After(10 * time.Second):
			tb.Fatalf("calls did not all start within 10s")
		}
	}
}

// TestPersistentOutOfOrder runs three calls at once and finishes them in
// reverse order: each answer carries its request's call_id and receipt.
func TestPersistentOutOfOrder(t *testing.T) {
	ids := []string{"a", "b", "c"}
	g := newGatedRun(ids...)
	s := startPersistent(t, context.Background(), newTool(t, g.run))
	for _, id := range ids {
		s.send(t, newRequest(id, nil, true))
	}
	g.awaitStarted(t, len(ids)) // all three run concurrently
	for i := len(ids) - 1; i >= 0; i-- {
		close(g.release[ids[i]])
		r := s.next(t)
		if got, want := *r.CallID, ids[i]; got != want {
			t.Fatalf("call_id=%q, want %q", got, want)
		}
		if got, want := string(r.Output), fmt.Sprintf("%q", ids[i]); got != want {
			t.Fatalf("output=%s, want %s", got, want)
		}
		if got, want := r.EffectReceipt.EffectID, "q1:"+ids[i]; got != want {
			t.Fatalf("receipt effect_id=%q, want %q", got, want)
		}
	}
	s.in.Close()
	if err := s.wait(t); err != nil {
		t.Fatalf("ServePersistent: %v", err)
	}
}

// TestPersistentWaitsForCallsInFlight closes stdin while a call runs: the
// call is still answered and ServePersistent returns only after that.
func TestPersistentWaitsForCallsInFlight(t *testing.T) {
	g := newGatedRun("slow")
	s := startPersistent(t, context.Background(), newTool(t, g.run))
	s.send(t, newRequest("slow", nil, false))
	g.awaitStarted(t, 1)
	s.in.Close()
	select {
	case err := <-s.done:
		t.Fatalf("ServePersistent returned %v with a call in flight", err)
	default:
	}
	close(g.release["slow"])
	if got, want := *s.next(t).CallID, "slow"; got != want {
		t.Fatalf("call_id=%q, want %q", got, want)
	}
	if err := s.wait(t); err != nil {
		t.Fatalf("ServePersistent: %v", err)
	}
}

// TestPersistentCancel cancels the context: calls in flight see it and are
// answered, then ServePersistent returns the context's error although
// stdin is still open.
func TestPersistentCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g := newGatedRun("x")
	s := startPersistent(t, ctx, newTool(t, g.run))
	s.send(t, newRequest("x", nil, false))
	g.awaitStarted(t, 1)
	cancel()
	if got, want := s.next(t).code(), "Cancelled"; got != want {
		t.Fatalf("code=%q, want %q", got, want)
	}
	if err := s.wait(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("ServePersistent=%v, want context.Canceled", err)
	}
}

// TestPersistentManyCalls sends many calls with large outputs at once.
// The output is a plain bytes.Buffer: unserialised writes would be a data
// race, and interleaved writes would break the lines.
func TestPersistentManyCalls(t *testing.T) {
	const n = 200
	var in bytes.Buffer
	for i := range n {
		req := newRequest(fmt.Sprintf("call-%d", i), map[string]any{"pad": strings.Repeat("x", 8<<10)}, i%2 == 0)
		in.Write(append(mustJSON(t, req), '\n'))
		in.WriteString("\n") // blank lines are skipped
	}
	var out bytes.Buffer
	tool := newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		return handler.Output(c.Input).WithReceipt(c.Receipt(handler.Applied, "")), nil
	})
	if err := handler.ServePersistent(context.Background(), tool, &in, &out); err != nil {
		t.Fatalf("ServePersistent: %v", err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		r := parseLine(t, append(sc.Bytes(), '\n'))
		if !r.OK || seen[*r.CallID] {
			t.Fatalf("response for %q: ok=%v, seen before=%v", *r.CallID, r.OK, seen[*r.CallID])
		}
		seen[*r.CallID] = true
		if r.EffectReceipt != nil && r.EffectReceipt.EffectID != "q1:"+*r.CallID {
			t.Fatalf("call %s got receipt for %s", *r.CallID, r.EffectReceipt.EffectID)
		}
	}
	if got, want := len(seen), n; got != want {
		t.Fatalf("%d responses, want %d", got, want)
	}
}

// TestPersistentBadLines checks that a line that is no request is answered
// with a protocol error, keeping the call_id when it can be read, and that
// serving goes on.
func TestPersistentBadLines(t *testing.T) {
	bad := newRequest("typed", nil, false)
	bad["context"].(map[string]any)["attempt"] = "one"
	in := "not json\n" + string(mustJSON(t, bad)) + "\n" + string(mustJSON(t, newRequest("good", 1, false))) // no final newline
	var out bytes.Buffer
	if err := handler.ServePersistent(context.Background(), newTool(t, echo), strings.NewReader(in), &out); err != nil {
		t.Fatalf("ServePersistent: %v", err)
	}
	got := map[string]string{}
	for _, line := range bytes.SplitAfter(out.Bytes(), []byte("\n")) {
		if len(line) > 0 {
			r := parseLine(t, line)
			got[*r.CallID] = r.code()
		}
	}
	want := map[string]string{"": "HandlerProtocolError", "typed": "HandlerProtocolError", "good": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("responses %v, want %v", got, want)
	}
}

// TestPersistentWriteError checks that a failing stdout is reported.
func TestPersistentWriteError(t *testing.T) {
	in := strings.NewReader(string(mustJSON(t, newRequest("c1", nil, false))) + "\n")
	err := handler.ServePersistent(context.Background(), newTool(t, echo), in, failingWriter{})
	if err == nil || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("ServePersistent=%v, want the write error", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestServeMode checks that Serve picks the mode from TOUBA_HANDLER_MODE.
func TestServeMode(t *testing.T) {
	two := string(mustJSON(t, newRequest("c1", nil, false))) + "\n" + string(mustJSON(t, newRequest("c2", nil, false))) + "\n"
	for _, tt := range []struct {
		mode      string
		wantLines int
		wantID    bool
	}{{"", 1, false}, {"persistent", 2, true}} {
		t.Run("mode="+tt.mode, func(t *testing.T) {
			t.Setenv(handler.ModeEnv, tt.mode)
			var out bytes.Buffer
			if err := handler.Serve(context.Background(), newTool(t, echo), strings.NewReader(two), &out); err != nil {
				t.Fatalf("Serve: %v", err)
			}
			lines := bytes.SplitAfter(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
			if got, want := len(lines), tt.wantLines; got != want {
				t.Fatalf("%d response lines, want %d: %s", got, want, out.Bytes())
			}
			for _, l := range lines {
				if r := parseLine(t, append(bytes.TrimSuffix(l, []byte("\n")), '\n')); (r.CallID != nil) != tt.wantID {
					t.Fatalf("call_id present=%v, want %v", r.CallID != nil, tt.wantID)
				}
			}
		})
	}
}
