package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/testkit"
)

// mustProcess returns a process runner of the fixture in mode, closed at
// the end of the test; edit adjusts the spec first.
func mustProcess(tb testing.TB, edit func(*handler.ProcessSpec), args ...string) handler.Runner {
	tb.Helper()
	spec := handler.ProcessSpec{Command: fixture, Args: args, Dir: tb.TempDir(), Timeout: 10 * time.Second}
	if edit != nil {
		edit(&spec)
	}
	r, err := handler.NewProcess(spec)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// waitGone waits until pid names no live process (gone or a zombie).
func waitGone(tb testing.TB, pid int) {
	tb.Helper()
	testkit.WaitFor(tb, 5*time.Second, func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || zombie(string(stat)) {
			killErr := syscall.Kill(pid, 0)
			return killErr == nil || errors.Is(killErr, syscall.ESRCH)
		}
		return false
	}, fmt.Sprintf("process %d to end", pid))
}

// zombie reports whether a /proc/PID/stat line says the process is dead.
func zombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

func readPID(tb testing.TB, file string) int {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		tb.Fatalf("grandchild pid file: %v", err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		tb.Fatal(err)
	}
	return pid
}

func TestProcessEcho(t *testing.T) {
	r := mustProcess(t, nil, "echo")
	req := newRequest(t, `{"order_id": 42}`, touba.RetryIdempotencyKey)
	var h hook
	res := r.Call(context.Background(), req, h.fn)
	if !res.OK || res.Err != nil {
		t.Fatalf("result = %+v, err %v", res, res.Err)
	}
	if got, want := h.n, 1; got != want {
		t.Fatalf("dispatched called %d times, want %d", got, want)
	}
	if got, want := string(res.Output), `{"order_id":42}`; got != want {
		t.Fatalf("output = %s, want %s", got, want)
	}
	if got, want := res.Outcome, touba.EffectApplied; got != want {
		t.Fatalf("outcome = %q, want %q", got, want)
	}
	if got, want := res.ReceiptRef, "ref:q-1:create"; got != want {
		t.Fatalf("receipt_ref = %q, want %q", got, want)
	}
	if !res.Dispatched {
		t.Fatal("Dispatched = false")
	}
}

func TestProcessWithoutEffectHasNoOutcome(t *testing.T) {
	r := mustProcess(t, nil, "echo")
	res := r.Call(context.Background(), newRequest(t, `[1,2]`, ""), func() error { return nil })
	if !res.OK || res.Outcome != "" || res.ReceiptErrorCode != "" {
		t.Fatalf("result = %+v, want ok with no outcome", res)
	}
}

func TestProcessBusinessError(t *testing.T) {
	r := mustProcess(t, nil, "refuse")
	res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), func() error { return nil })
	if got, want := errCode(res), "ExternalWriteRefused"; got != want {
		t.Fatalf("code = %q, want %q", got, want)
	}
	if got, want := res.Outcome, touba.EffectNotApplied; got != want {
		t.Fatalf("outcome = %q, want %q", got, want)
	}
	if res.OK || res.ReceiptErrorCode != "" {
		t.Fatalf("result = %+v", res)
	}
}

func TestProcessTimeoutKillsGrandchild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	r := mustProcess(t, func(s *handler.ProcessSpec) { s.Timeout = 3 * time.Second }, "spawn", pidFile)
	start := time.Now()
	res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryReconcile), func() error { return nil })
	if got, want := errCode(res), touba.EHandlerTimeout; got != want {
		t.Fatalf("code = %q, want %q (%v)", got, want, res.Err)
	}
	if got, want := res.Outcome, touba.EffectUnknown; got != want {
		t.Fatalf("outcome = %q, want %q", got, want)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("call took %s after a 500ms timeout", elapsed)
	}
	waitGone(t, readPID(t, pidFile))
}

func TestProcessLeftoverGrandchildDoesNotHoldTheCall(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	r := mustProcess(t, func(s *handler.ProcessSpec) { s.Timeout = 20 * time.Second }, "linger", pidFile)
	start := time.Now()
	res := r.Call(context.Background(), newRequest(t, `{"a":1}`, touba.RetryIdempotencyKey), func() error { return nil })
	if !res.OK || res.Outcome != touba.EffectApplied {
		t.Fatalf("result = %+v, err %v", res, res.Err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("call took %s: it waited for the grandchild", elapsed)
	}
	waitGone(t, readPID(t, pidFile))
}

func TestProcessCancelKillsHandler(t *testing.T) {
	r := mustProcess(t, nil, "sleep")
	ctx, cancel := context.WithCancel(context.Background())
	res := r.Call(ctx, newRequest(t, `{}`, touba.RetryNone), func() error { cancel(); return nil })
	if got, want := errCode(res), touba.EHandlerTimeout; got != want {
		t.Fatalf("code = %q, want %q", got, want)
	}
	if got, want := res.Outcome, touba.EffectUnknown; got != want {
		t.Fatalf("outcome = %q, want %q", got, want)
	}
}

func TestProcessInputTooLargeNeverStarts(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	r := mustProcess(t, func(s *handler.ProcessSpec) { s.MaxPayload = 512 }, "touch", marker)
	var h hook
	res := r.Call(context.Background(), newRequest(t, `"`+strings.Repeat("x", 600)+`"`, touba.RetryNone), h.fn)
	if got, want := errCode(res), touba.EHandlerPayloadTooLarge; got != want {
		t.Fatalf("code = %q, want %q", got, want)
	}
	if got, want := res.Outcome, touba.EffectNotApplied; got != want {
		t.Fatalf("outcome = %q, want %q", got, want)
	}
	if h.n != 0 || res.Dispatched {
		t.Fatalf("dispatched hook ran %d times", h.n)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("handler started: stat marker: %v", err)
	}
	// The same runner with a small input does start it.
	if res := r.Call(context.Background(), newRequest(t, `1`, touba.RetryNone), h.fn); !res.OK {
		t.Fatalf("small input: %+v %v", res, res.Err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("handler did not start for a small input: %v", err)
	}
}

func TestProcessBadAnswers(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code string
	}{
		{[]string{"garbage"}, touba.EHandlerProtocolError},
		{[]string{"trailing"}, touba.EHandlerProtocolError},
		{[]string{"silent"}, touba.EHandlerProtocolError},
		{[]string{"exit1"}, touba.EHandlerFailed},
		{[]string{"big", "300"}, touba.EHandlerPayloadTooLarge},
		{[]string{"no-such-mode"}, touba.EHandlerFailed},
	} {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			r := mustProcess(t, func(s *handler.ProcessSpec) { s.MaxPayload = 256 }, tt.args...)
			res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil })
			if got, want := errCode(res), tt.code; got != want {
				t.Fatalf("code = %q, want %q (%v)", got, want, res.Err)
			}
			if got, want := res.Outcome, touba.EffectUnknown; got != want {
				t.Fatalf("outcome = %q, want %q", got, want)
			}
			if res.OK || !res.Dispatched {
				t.Fatalf("result = %+v", res)
			}
		})
	}
}

func TestProcessStartFailureIsNotApplied(t *testing.T) {
	r, err := handler.NewProcess(handler.ProcessSpec{Command: filepath.Join(t.TempDir(), "missing"), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var h hook
	res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), h.fn)
	if errCode(res) != touba.EHandlerFailed || res.Outcome != touba.EffectNotApplied || h.n != 0 {
		t.Fatalf("result = %+v, hook %d", res, h.n)
	}
}

func TestProcessDispatchedHookError(t *testing.T) {
	r := mustProcess(t, nil, "echo")
	h := hook{err: touba.Errorf(touba.EEffectInProgress, "taken")}
	res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), h.fn)
	if got, want := errCode(res), touba.EEffectInProgress; got != want {
		t.Fatalf("code = %q, want %q", got, want)
	}
	if res.Outcome != touba.EffectNotApplied || res.Dispatched || h.n != 1 {
		t.Fatalf("result = %+v, hook %d", res, h.n)
	}
}

func TestProcessEnvironment(t *testing.T) {
	t.Setenv("TOUBA_TEST_DAEMON_MARKER", "daemon-only")
	t.Setenv("LANG", "C.UTF-8")
	r := mustProcess(t, func(s *handler.ProcessSpec) {
		s.Secrets = map[string]string{"API_TOKEN": "s3cret-value"}
	}, "env")
	res := r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
	if !res.OK {
		t.Fatalf("result = %+v, err %v", res, res.Err)
	}
	var env []string
	if err := json.Unmarshal(res.Output, &env); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k := range got {
		switch k {
		case "PATH", "LANG", "TZ", "API_TOKEN":
		default:
			sort.Strings(env)
			t.Fatalf("handler sees %q; environment %q", k, env)
		}
	}
	if got, want := got["API_TOKEN"], "s3cret-value"; got != want {
		t.Fatalf("API_TOKEN = %q, want %q", got, want)
	}
	if got, want := got["LANG"], "C.UTF-8"; got != want {
		t.Fatalf("LANG = %q, want %q", got, want)
	}
	if got, want := got["PATH"], os.Getenv("PATH"); got != want {
		t.Fatalf("PATH = %q, want %q", got, want)
	}
}

func TestProcessStderrIsLoggedWithoutSecrets(t *testing.T) {
	var logs bytes.Buffer
	r := mustProcess(t, func(s *handler.ProcessSpec) {
		s.Secrets = map[string]string{"API_TOKEN": "s3cret-value"}
		s.Log = zerolog.New(&logs)
	}, "exit1")
	res := r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
	if got, want := errCode(res), touba.EHandlerFailed; got != want {
		t.Fatalf("code = %q, want %q", got, want)
	}
	if !strings.Contains(logs.String(), "boom token=[redacted]") {
		t.Fatalf("log lacks the redacted stderr: %s", logs.String())
	}
	if strings.Contains(logs.String(), "s3cret-value") || strings.Contains(res.Err.Message, "s3cret") {
		t.Fatalf("secret leaked: %s / %s", logs.String(), res.Err.Message)
	}
}

func TestProcessNetworkIsolation(t *testing.T) {
	if !handler.NetworkIsolation() {
		t.Skip("this host cannot isolate a handler's network")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tt := range []struct {
		grants    []string
		connected bool
	}{{nil, false}, {[]string{"network"}, true}} {
		r := mustProcess(t, func(s *handler.ProcessSpec) { s.Grants = tt.grants }, "dial", ln.Addr().String())
		res := r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
		if !res.OK {
			t.Fatalf("grants %v: %+v %v", tt.grants, res, res.Err)
		}
		if got, want := string(res.Output), `{"connected":`+strconv.FormatBool(tt.connected)+`}`; got != want {
			t.Fatalf("grants %v: output %s, want %s", tt.grants, got, want)
		}
	}
}

func TestNewProcessRefusesBadSpecs(t *testing.T) {
	for _, spec := range []handler.ProcessSpec{
		{},
		{Command: "x", Timeout: -1},
		{Command: "x", Secrets: map[string]string{"A=B": "v"}},
	} {
		if _, err := handler.NewProcess(spec); touba.ErrorCode(err) != touba.ECONFIG {
			t.Fatalf("NewProcess(%+v) = %v, want %s", spec, err, touba.ECONFIG)
		}
	}
}
