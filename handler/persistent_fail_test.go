package handler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/testkit"
)

// wantUnknown checks that res ended a dispatched call with code and, as a
// call with an effect, outcome unknown.
func wantUnknown(tb testing.TB, name string, res *handler.Result, code string) {
	tb.Helper()
	if got, want := errCode(res), code; got != want {
		tb.Fatalf("%s: code %q, want %q (%v)", name, got, want, res.Err)
	}
	if got, want := res.Outcome, touba.EffectUnknown; got != want {
		tb.Fatalf("%s: outcome %q, want %q", name, got, want)
	}
	if res.OK || !res.Dispatched {
		tb.Fatalf("%s: result %+v", name, res)
	}
}

// hangers starts n calls that the fixture never answers and waits until
// the fixture has read them all.
func (r *pRunner) hangers(tb testing.TB, n int) []<-chan *handler.Result {
	tb.Helper()
	chs := make([]<-chan *handler.Result, n)
	for i := range n {
		id := fmt.Sprintf("hang-%d", i)
		chs[i] = r.async(context.Background(), preq(tb, id, op("hang"), true))
		r.arrived(tb, id)
	}
	return chs
}

func TestPersistentTimeoutEndsEveryCallInFlight(t *testing.T) {
	// The other calls must be read by the handler before the first call's
	// timeout: generous, for a loaded machine. Which call's timeout fires
	// first is not the point (timers a few milliseconds apart may run in
	// either order); that the first one ends all three at once, with its
	// one cause, is.
	const timeout = 3 * time.Second
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, _ *handler.PersistentOptions) { s.Timeout = timeout })
	pid := r.callPID(t, "first")
	never := r.async(context.Background(), preq(t, "never", op("hang"), true))
	r.arrived(t, "never")
	chs := append([]<-chan *handler.Result{never}, r.hangers(t, 2)...)
	var cause string
	for i, ch := range chs {
		res := wait(t, ch)
		wantUnknown(t, fmt.Sprint("call ", i), res, touba.EHandlerTimeout)
		if i == 0 {
			cause = res.Err.Message
		} else if res.Err.Message != cause {
			t.Fatalf("call %d ended by %q, call 0 by %q: want one timeout ending every call", i, res.Err.Message, cause)
		}
	}
	if !strings.Contains(cause, "ran past its timeout") {
		t.Fatalf("calls ended by %q, want a timeout", cause)
	}
	waitGone(t, pid)
	if next := r.callPID(t, "next"); next == pid {
		t.Fatalf("next call served by the killed process %d", pid)
	}
}

func TestPersistentTimeoutKillsGrandchild(t *testing.T) {
	// Generous: the handler must have started its grandchild (and written
	// its pid) before the timeout kills, even on a loaded machine.
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, _ *handler.PersistentOptions) { s.Timeout = 3 * time.Second })
	res := r.Call(context.Background(), preq(t, "spawn", op("spawn", "pid_file", pidFile), true), func() error { return nil })
	wantUnknown(t, "spawn", res, touba.EHandlerTimeout)
	waitGone(t, readPID(t, pidFile))
}

func TestPersistentTimeoutWhileTheRequestIsBlocked(t *testing.T) {
	// Generous: the blocked call must reach the process that stopped
	// reading before stopread's own timeout kills it (then a fresh process
	// would answer it), even on a loaded machine.
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, _ *handler.PersistentOptions) { s.Timeout = 3 * time.Second })
	stopped := r.async(context.Background(), preq(t, "stopread", op("stopread"), true))
	r.arrived(t, "stopread")
	select {
	case res := <-stopped:
		t.Fatalf("stopread ended (%v) before the blocked call was sent: the timeout is too short for this machine", res.Err)
	default:
	}
	// More than a pipe holds: the write blocks until the timeout kills.
	big := op("echo", "pad", strings.Repeat("x", 1<<19))
	wantUnknown(t, "blocked", r.Call(context.Background(), preq(t, "blocked", big, true), func() error { return nil }),
		touba.EHandlerTimeout)
	wantUnknown(t, "stopread", wait(t, stopped), touba.EHandlerTimeout)
}

func TestPersistentCrashEndsEveryCallInFlight(t *testing.T) {
	r := mustPersistent(t, "", nil)
	pid := r.callPID(t, "first")
	chs := r.hangers(t, 3)
	plain := r.async(context.Background(), preq(t, "plain", op("hang"), false))
	r.arrived(t, "plain")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chs {
		wantUnknown(t, fmt.Sprint("hang ", i), wait(t, ch), touba.EHandlerFailed)
	}
	// A call without an effect has no outcome, only the error.
	if res := wait(t, plain); errCode(res) != touba.EHandlerFailed || res.Outcome != "" || !res.Dispatched {
		t.Fatalf("plain: %+v %v", res, res.Err)
	}
	if next := r.callPID(t, "next"); next == pid {
		t.Fatalf("next call served by the killed process %d", pid)
	}
}

func TestPersistentHandlerExitEndsCallsInFlight(t *testing.T) {
	r := mustPersistent(t, "", nil)
	chs := r.hangers(t, 2)
	wantUnknown(t, "exit", r.Call(context.Background(), preq(t, "exit", op("exit"), true), func() error { return nil }),
		touba.EHandlerFailed)
	for i, ch := range chs {
		wantUnknown(t, fmt.Sprint("hang ", i), wait(t, ch), touba.EHandlerFailed)
	}
}

func TestPersistentClosedStdoutEndsCallsInFlight(t *testing.T) {
	r := mustPersistent(t, "", nil)
	pid := r.callPID(t, "first")
	chs := r.hangers(t, 1)
	wantUnknown(t, "closeout", r.Call(context.Background(), preq(t, "closeout", op("closeout"), true), func() error { return nil }),
		touba.EHandlerFailed)
	wantUnknown(t, "hang", wait(t, chs[0]), touba.EHandlerFailed)
	waitGone(t, pid)
}

func TestPersistentStrayLines(t *testing.T) {
	for _, tt := range []struct {
		op      string
		answers bool // the bad call itself got its (first) answer
	}{{"garbage", false}, {"unknown", false}, {"twice", true}} {
		t.Run(tt.op, func(t *testing.T) {
			r := mustPersistent(t, "", nil)
			pid := r.callPID(t, "first")
			chs := r.hangers(t, 2)
			req := preq(t, "bad", op(tt.op), true)
			res := r.Call(context.Background(), req, func() error { return nil })
			if tt.answers {
				okOut(t, req, res)
			} else {
				wantUnknown(t, tt.op, res, touba.EHandlerProtocolError)
			}
			for i, ch := range chs {
				wantUnknown(t, fmt.Sprint("hang ", i), wait(t, ch), touba.EHandlerProtocolError)
			}
			waitGone(t, pid)
			if next := r.callPID(t, "next"); next == pid {
				t.Fatalf("next call served by the killed process %d", pid)
			}
		})
	}
}

func TestPersistentOutputLineTooLarge(t *testing.T) {
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, _ *handler.PersistentOptions) { s.MaxPayload = 1024 })
	chs := r.hangers(t, 1)
	res := r.Call(context.Background(), preq(t, "big", op("big", "n", 100000), true), func() error { return nil })
	wantUnknown(t, "big", res, touba.EHandlerPayloadTooLarge)
	wantUnknown(t, "hang", wait(t, chs[0]), touba.EHandlerPayloadTooLarge)
}

func TestPersistentInputTooLargeIsNeverSent(t *testing.T) {
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, _ *handler.PersistentOptions) { s.MaxPayload = 64 })
	var h hook
	res := r.Call(context.Background(), preq(t, "big", strings.Repeat("x", 100), true), h.fn)
	if errCode(res) != touba.EHandlerPayloadTooLarge || res.Outcome != touba.EffectNotApplied || res.Dispatched || h.n != 0 {
		t.Fatalf("result %+v %v, hook ran %d times", res, res.Err, h.n)
	}
}

func TestPersistentDispatchedHookErrorSendsNothing(t *testing.T) {
	r := mustPersistent(t, "", nil)
	pid := r.callPID(t, "first")
	h := hook{err: touba.Errorf(touba.EEffectInProgress, "taken")}
	res := r.Call(context.Background(), preq(t, "refused", op("echo"), true), h.fn)
	if errCode(res) != touba.EEffectInProgress || res.Outcome != touba.EffectNotApplied || res.Dispatched || h.n != 1 {
		t.Fatalf("result %+v %v, hook ran %d times", res, res.Err, h.n)
	}
	// The next call's request follows on the same process; the refused
	// one never reached it.
	if next := r.callPID(t, "next"); next != pid {
		t.Fatalf("next call served by pid %d, want %d", next, pid)
	}
	if _, err := os.Stat(filepath.Join(r.marks, "refused.arrived")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused request reached the handler: %v", err)
	}
}

// A call cancelled once the handler has read its request ends the process
// and every call in flight there as unknown. The cancel waits for the
// fixture's mark that the line arrived: cancelling earlier races the write
// of the line, and a line never written is rightly not_applied (below).
func TestPersistentCancelKillsTheProcess(t *testing.T) {
	r := mustPersistent(t, "", nil)
	pid := r.callPID(t, "first")
	other := r.hangers(t, 1)[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := r.async(ctx, preq(t, "cancelled", op("hang"), true))
	r.arrived(t, "cancelled")
	cancel()
	wantUnknown(t, "cancelled", wait(t, ch), touba.EHandlerTimeout)
	wantUnknown(t, "other", wait(t, other), touba.EHandlerTimeout)
	waitGone(t, pid)
}

// A call cancelled right after dispatched, racing the write of its line:
// either the line was written (unknown) or it was not (not_applied), and a
// not_applied call never reached the handler.
func TestPersistentCancelAtDispatch(t *testing.T) {
	r := mustPersistent(t, "", nil)
	pid := r.callPID(t, "first")
	ctx, cancel := context.WithCancel(context.Background())
	res := r.Call(ctx, preq(t, "cancelled", op("hang"), true), func() error { cancel(); return nil })
	if got, want := errCode(res), touba.EHandlerTimeout; got != want {
		t.Fatalf("code %q, want %q (%v)", got, want, res.Err)
	}
	switch res.Outcome {
	case touba.EffectUnknown:
	case touba.EffectNotApplied:
		// The process is killed either way: once it is gone, no mark can
		// still come.
		waitGone(t, pid)
		if _, err := os.Stat(filepath.Join(r.marks, "cancelled.arrived")); err == nil {
			t.Fatal("outcome not_applied, but the handler read the request")
		}
	default:
		t.Fatalf("outcome %q, want unknown or not_applied", res.Outcome)
	}
	waitGone(t, pid)
}

func TestPersistentWaitForSlotIsBoundedByContext(t *testing.T) {
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, o *handler.PersistentOptions) {
		s.Timeout, o.MaxInFlight = 2*time.Second, 1
	})
	busy := r.hangers(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var h hook
	res := r.Call(ctx, preq(t, "waiting", op("echo"), true), h.fn)
	if errCode(res) != touba.EHandlerTimeout || res.Outcome != touba.EffectNotApplied || res.Dispatched || h.n != 0 {
		t.Fatalf("result %+v %v, hook ran %d times", res, res.Err, h.n)
	}
	wantUnknown(t, "busy", wait(t, busy), touba.EHandlerTimeout)
	// The slot is free again.
	r.callPID(t, "after")
}

func TestPersistentCloseRefusesCallsAndEndsTheProcess(t *testing.T) {
	r := mustPersistent(t, "", nil)
	pid := r.callPID(t, "first")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(r.marks, fmt.Sprintf("exit-%d", pid)))
	waitGone(t, pid)
	var h hook
	res := r.Call(context.Background(), preq(t, "late", op("echo"), true), h.fn)
	if errCode(res) != touba.EHandlerFailed || res.Outcome != touba.EffectNotApplied || h.n != 0 {
		t.Fatalf("result %+v %v, hook ran %d times", res, res.Err, h.n)
	}
}

// syncBuffer is a log destination written from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestPersistentStderrIsLoggedWithoutSecrets(t *testing.T) {
	var logs syncBuffer
	r := mustPersistent(t, "", func(s *handler.ProcessSpec, _ *handler.PersistentOptions) {
		s.Secrets = map[string]string{"API_TOKEN": "s3cret-value"}
		s.Log = zerolog.New(&logs)
	})
	req := preq(t, "stderr", op("stderr"), false)
	okOut(t, req, r.Call(context.Background(), req, func() error { return nil }))
	r.Close()
	testkit.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "handler process ended") },
		"a log of the process's end")
	if !strings.Contains(logs.String(), "boom token=[redacted]") {
		t.Fatalf("log lacks the redacted stderr: %s", logs.String())
	}
	if strings.Contains(logs.String(), "s3cret-value") {
		t.Fatalf("secret leaked: %s", logs.String())
	}
}
