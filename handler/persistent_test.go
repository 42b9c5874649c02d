package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/testkit"
)

// pRunner is a persistent runner of the persistent fixture and the folder
// where the fixture leaves its marks.
type pRunner struct {
	handler.Runner
	marks string
}

// mustPersistent returns a persistent runner of command (the persistent
// fixture when empty), closed at the end of the test; edit adjusts the
// spec and options first.
func mustPersistent(tb testing.TB, command string, edit func(*handler.ProcessSpec, *handler.PersistentOptions)) *pRunner {
	tb.Helper()
	marks := tb.TempDir()
	spec := handler.ProcessSpec{Command: command, Dir: tb.TempDir(), Timeout: 10 * time.Second}
	if command == "" {
		spec.Command, spec.Args = pfixture, []string{marks}
	}
	var opts handler.PersistentOptions
	if edit != nil {
		edit(&spec, &opts)
	}
	r, err := handler.NewPersistent(spec, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// Its processes write into marks: let them end before it goes.
		r.Close()
		done := make(chan struct{})
		go func() {
			handler.WaitPersistent(r)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			tb.Error("persistent handler processes still running 30s after Close")
		}
	})
	return &pRunner{Runner: r, marks: marks}
}

// preq is a request with its own call id and, when effect, its own effect.
func preq(tb testing.TB, callID string, input any, effect bool) *handler.Request {
	tb.Helper()
	retryMode := ""
	if effect {
		retryMode = touba.RetryIdempotencyKey
	}
	b, err := json.Marshal(input)
	if err != nil {
		tb.Fatal(err)
	}
	req := newRequest(tb, string(b), retryMode)
	req.Context.CallID = callID
	if req.Context.Effect != nil {
		req.Context.Effect.EffectID = "q-1:" + callID
	}
	return req
}

// op is the fixture input that picks what a call does.
func op(name string, kv ...any) map[string]any {
	in := map[string]any{"op": name}
	for i := 0; i+1 < len(kv); i += 2 {
		in[kv[i].(string)] = kv[i+1]
	}
	return in
}

// async runs a call in the background; wait collects its Result.
func (r *pRunner) async(ctx context.Context, req *handler.Request) <-chan *handler.Result {
	ch := make(chan *handler.Result, 1)
	go func() { ch <- r.Call(ctx, req, func() error { return nil }) }()
	return ch
}

func wait(tb testing.TB, ch <-chan *handler.Result) *handler.Result {
	tb.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(30 * time.Second):
		tb.Fatal("call did not return within 30s")
		return nil
	}
}

// arrived waits until the fixture has read the request of callID.
func (r *pRunner) arrived(tb testing.TB, callID string) {
	tb.Helper()
	waitFile(tb, filepath.Join(r.marks, callID+".arrived"))
}

func waitFile(tb testing.TB, path string) {
	tb.Helper()
	testkit.WaitFor(tb, 10*time.Second, func() bool {
		_, err := os.Stat(path)
		return err == nil
	}, path+" to appear")
}

// fixtureOut is the output of a fixture call that was answered.
type fixtureOut struct {
	PID         int             `json:"pid"`
	Mode        string          `json:"mode"`
	Cwd         string          `json:"cwd"`
	Echo        json.RawMessage `json:"echo"`
	MaxInFlight int             `json:"max_in_flight"`
	Arrival     int             `json:"arrival"`
	Answer      int             `json:"answer"`
	Env         []string        `json:"env"`
}

// okOut checks that res is an applied (or, without an effect, plain) ok
// answer and decodes its output.
func okOut(tb testing.TB, req *handler.Request, res *handler.Result) fixtureOut {
	tb.Helper()
	if !res.OK || res.Err != nil || !res.Dispatched {
		tb.Fatalf("call %s: result %+v, err %v", req.Context.CallID, res, res.Err)
	}
	if req.Context.Effect != nil {
		if got, want := res.Outcome, touba.EffectApplied; got != want {
			tb.Fatalf("call %s: outcome %q, want %q", req.Context.CallID, got, want)
		}
	}
	var out fixtureOut
	if err := json.Unmarshal(res.Output, &out); err != nil {
		tb.Fatalf("call %s: output %s: %v", req.Context.CallID, res.Output, err)
	}
	return out
}

// callPID makes one echo call and returns the pid of the process that
// answered it.
func (r *pRunner) callPID(tb testing.TB, callID string) int {
	tb.Helper()
	req := preq(tb, callID, op("echo"), true)
	return okOut(tb, req, r.Call(context.Background(), req, func() error { return nil })).PID
}

func TestPersistentAnswersOutOfOrderAreMatchedByCallID(t *testing.T) {
	r := mustPersistent(t, "", nil)
	const n = 4
	reqs := make([]*handler.Request, n)
	chs := make([]<-chan *handler.Result, n)
	for i := range n {
		reqs[i] = preq(t, fmt.Sprintf("call-%d", i), op("reverse", "n", n, "tag", i), true)
		chs[i] = r.async(context.Background(), reqs[i])
	}
	pids := map[int]bool{}
	for i := range n {
		res := wait(t, chs[i])
		out := okOut(t, reqs[i], res)
		// Each result is its own call's: its input, its receipt.
		if got, want := string(out.Echo), string(reqs[i].Input); got != want {
			t.Fatalf("call %d got the output of %s", i, got)
		}
		if got, want := res.ReceiptRef, "ref:q-1:call-"+fmt.Sprint(i); got != want {
			t.Fatalf("call %d: receipt_ref %q, want %q", i, got, want)
		}
		// The fixture answered the last to arrive first.
		if got, want := out.Answer, n-1-out.Arrival; got != want {
			t.Fatalf("call %d arrived %d and was answered %d-th, want %d-th", i, out.Arrival, got, want)
		}
		pids[out.PID] = true
	}
	if len(pids) != 1 {
		t.Fatalf("calls served by %d processes, want 1", len(pids))
	}
	// The process stays for the next call.
	if pid := r.callPID(t, "after"); !pids[pid] {
		t.Fatalf("next call served by pid %d, want the same process %v", pid, pids)
	}
}

func TestPersistentMaxInFlight(t *testing.T) {
	const limit, calls = 3, 12
	r := mustPersistent(t, "", func(_ *handler.ProcessSpec, o *handler.PersistentOptions) { o.MaxInFlight = limit })
	reqs := make([]*handler.Request, calls)
	chs := make([]<-chan *handler.Result, calls)
	for i := range calls {
		// Each call waits until the limit was reached once, then stays a
		// little so later calls overlap with it.
		reqs[i] = preq(t, fmt.Sprintf("call-%d", i), op("gate", "n", limit, "hold_ms", 20), false)
		chs[i] = r.async(context.Background(), reqs[i])
	}
	most := 0
	for i := range calls {
		out := okOut(t, reqs[i], wait(t, chs[i]))
		if out.MaxInFlight > limit {
			t.Fatalf("the handler had %d calls in flight at once, max_in_flight is %d", out.MaxInFlight, limit)
		}
		most = max(most, out.MaxInFlight)
	}
	if got, want := most, limit; got != want {
		t.Fatalf("at most %d calls in flight, want %d", got, want)
	}
}

func TestPersistentMaxCallsRestartsTheProcess(t *testing.T) {
	r := mustPersistent(t, "", func(_ *handler.ProcessSpec, o *handler.PersistentOptions) { o.MaxCalls = 3 })
	first := r.callPID(t, "c1")
	for _, id := range []string{"c2", "c3"} {
		if got := r.callPID(t, id); got != first {
			t.Fatalf("call %s served by pid %d, want %d", id, got, first)
		}
	}
	// After its third call the first process had its stdin closed and
	// left by itself once done.
	waitFile(t, filepath.Join(r.marks, fmt.Sprintf("exit-%d", first)))
	waitGone(t, first)
	if second := r.callPID(t, "c4"); second == first {
		t.Fatalf("fourth call served by the first process %d", first)
	}
}

func TestPersistentIdleTimeoutRestartsTheProcess(t *testing.T) {
	r := mustPersistent(t, "", func(_ *handler.ProcessSpec, o *handler.PersistentOptions) {
		o.IdleTimeout = 100 * time.Millisecond
	})
	first := r.callPID(t, "c1")
	waitFile(t, filepath.Join(r.marks, fmt.Sprintf("exit-%d", first)))
	waitGone(t, first)
	if second := r.callPID(t, "c2"); second == first {
		t.Fatalf("call after idle served by the idle process %d", first)
	}
}

func TestPersistentRestartsUnderConcurrency(t *testing.T) {
	// Frequent retirements while calls are in flight: every call is
	// answered, by at least calls/maxCalls processes.
	const calls, maxCalls = 120, 7
	r := mustPersistent(t, "", func(_ *handler.ProcessSpec, o *handler.PersistentOptions) {
		o.MaxInFlight, o.MaxCalls = 4, maxCalls
	})
	var mu sync.Mutex
	pids := map[int]int{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < calls; i += 16 {
				req := preq(t, fmt.Sprintf("call-%d", i), op("echo"), true)
				res := r.Call(context.Background(), req, func() error { return nil })
				if !res.OK || res.Outcome != touba.EffectApplied {
					t.Errorf("call %d: %+v %v", i, res, res.Err)
					return
				}
				var out fixtureOut
				_ = json.Unmarshal(res.Output, &out)
				mu.Lock()
				pids[out.PID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for pid, n := range pids {
		if n > maxCalls {
			t.Fatalf("process %d served %d calls, max_calls is %d", pid, n, maxCalls)
		}
	}
	if got, want := len(pids), calls/maxCalls; got < want {
		t.Fatalf("%d processes served %d calls, want at least %d", got, calls, want)
	}
}

func TestPersistentEnvironmentAndCwd(t *testing.T) {
	t.Setenv("TOUBA_TEST_DAEMON_MARKER", "daemon-only")
	t.Setenv("LANG", "C.UTF-8")
	var dir string
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, _ *handler.PersistentOptions) {
		s.Secrets = map[string]string{"API_TOKEN": "s3cret-value"}
		dir = s.Dir
	})
	req := preq(t, "env", op("env"), false)
	out := okOut(t, req, r.Call(context.Background(), req, func() error { return nil }))
	got := map[string]string{}
	for _, kv := range out.Env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{"PATH": os.Getenv("PATH"), "LANG": "C.UTF-8", "API_TOKEN": "s3cret-value",
		handler.ModeEnv: "persistent"}
	if tz, ok := os.LookupEnv("TZ"); ok {
		want["TZ"] = tz
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handler environment %v, want %v", got, want)
	}
	if got, want := out.Cwd, dir; got != want {
		t.Fatalf("handler cwd %q, want %q", got, want)
	}
}

func TestPersistentWithTheGoSDK(t *testing.T) {
	r := mustPersistent(t, sdkecho, func(_ *handler.ProcessSpec, o *handler.PersistentOptions) { o.MaxInFlight = 8 })
	const calls = 64
	reqs := make([]*handler.Request, calls)
	chs := make([]<-chan *handler.Result, calls)
	for i := range calls {
		reqs[i] = preq(t, fmt.Sprintf("call-%d", i), map[string]int{"n": i}, true)
		chs[i] = r.async(context.Background(), reqs[i])
	}
	pids := map[int]bool{}
	for i := range calls {
		res := wait(t, chs[i])
		out := okOut(t, reqs[i], res)
		if got, want := res.ReceiptRef, "echo:"+reqs[i].Context.CallID; got != want {
			t.Fatalf("call %d: receipt_ref %q, want %q", i, got, want)
		}
		if !bytes.Equal(out.Echo, reqs[i].Input) || out.Mode != "persistent" {
			t.Fatalf("call %d: output %s", i, res.Output)
		}
		pids[out.PID] = true
	}
	if len(pids) != 1 {
		t.Fatalf("%d calls served by %d processes, want 1", calls, len(pids))
	}
}

func TestNewPersistentRefusesBadSpecs(t *testing.T) {
	for _, tt := range []struct {
		spec handler.ProcessSpec
		opts handler.PersistentOptions
	}{
		{handler.ProcessSpec{}, handler.PersistentOptions{}},
		{handler.ProcessSpec{Command: "x", Secrets: map[string]string{handler.ModeEnv: "one-shot"}}, handler.PersistentOptions{}},
		{handler.ProcessSpec{Command: "x"}, handler.PersistentOptions{MaxInFlight: -1}},
		{handler.ProcessSpec{Command: "x"}, handler.PersistentOptions{IdleTimeout: -time.Second}},
	} {
		if _, err := handler.NewPersistent(tt.spec, tt.opts); touba.ErrorCode(err) != touba.ECONFIG {
			t.Fatalf("NewPersistent(%+v, %+v) = %v, want %s", tt.spec, tt.opts, err, touba.ECONFIG)
		}
	}
}
