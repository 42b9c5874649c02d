package handler_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testHandler is the built internal/testhandler, shared by the tests of
// this package and removed by TestMain.
var testHandler struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testHandler.dir != "" {
		os.RemoveAll(testHandler.dir)
	}
	os.Exit(code)
}

// buildTestHandler builds internal/testhandler once and returns the
// binary's path.
func buildTestHandler(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds a binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Skipf("no go command: %v", err)
	}
	testHandler.once.Do(func() {
		testHandler.dir, testHandler.err = os.MkdirTemp("", "touba-sdk-test-")
		if testHandler.err != nil {
			return
		}
		testHandler.bin = filepath.Join(testHandler.dir, "testhandler")
		cmd := exec.Command(goBin, "build", "-o", testHandler.bin, "github.com/touba/touba-trigger/sdk/handler/internal/testhandler")
		if out, err := cmd.CombinedOutput(); err != nil {
			testHandler.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if testHandler.err != nil {
		tb.Fatal(testHandler.err)
	}
	return testHandler.bin
}

// handlerEnv is the test's environment without TOUBA_HANDLER_MODE, plus extra.
func handlerEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOUBA_HANDLER_MODE=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// childOutput is the test handler's output.
type childOutput struct {
	Echo      any    `json:"echo"`
	Operation string `json:"operation"`
	CallID    string `json:"call_id"`
	EffectID  string `json:"effect_id"`
	PID       int    `json:"pid"`
}

func (r response) childOutput(tb testing.TB) childOutput {
	tb.Helper()
	var out childOutput
	mustDecodeStrict(tb, r.Output, &out)
	return out
}

// TestEndToEndOneShot runs the built handler once per request, as a
// process binding without persistence does.
func TestEndToEndOneShot(t *testing.T) {
	bin := buildTestHandler(t)
	tests := []struct {
		name     string
		input    map[string]any
		wantCode string
		wantRcpt string
	}{
		{"echo with receipt", map[string]any{"echo": "hi", "receipt": "applied", "ref": "order:42"}, "", "applied"},
		{"business error", map[string]any{"fail": "ExternalWriteRefused", "receipt": "not_applied"}, "ExternalWriteRefused", "not_applied"},
		{"panic", map[string]any{"panic": true}, "HandlerPanic", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = handlerEnv()
			cmd.Stdin = bytes.NewReader(mustJSON(t, newRequest("c1", tt.input, true)))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("handler exited with %v; stderr:\n%s", err, stderr.Bytes())
			}
			r := parseLine(t, stdout.Bytes())
			if got, want := r.code(), tt.wantCode; got != want {
				t.Fatalf("code=%q, want %q", got, want)
			}
			rc := r.EffectReceipt
			if !r.OK {
				rc = r.errorReceipt(t)
			}
			if tt.wantRcpt == "" {
				if rc != nil {
					t.Fatalf("receipt=%+v, want none", rc)
				}
				return
			}
			if rc == nil || rc.Outcome != tt.wantRcpt || rc.EffectID != "q1:c1" {
				t.Fatalf("receipt=%+v, want %s for q1:c1", rc, tt.wantRcpt)
			}
			if r.OK {
				if out := r.childOutput(t); out.Echo != "hi" || out.CallID != "c1" || out.EffectID != "q1:c1" || out.Operation != "invoke" {
					t.Fatalf("output=%+v", out)
				}
			}
		})
	}
}

// TestEndToEndPersistent runs the built handler as one long-lived process:
// concurrent calls answered out of order on one pid, then a clean exit
// once stdin closes, after the calls in flight are answered.
func TestEndToEndPersistent(t *testing.T) {
	bin := buildTestHandler(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = handlerEnv("TOUBA_HANDLER_MODE=persistent")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	send := func(id string, input map[string]any) {
		t.Helper()
		if _, err := stdin.Write(append(mustJSON(t, newRequest(id, input, true)), '\n')); err != nil {
			t.Fatalf("write %s: %v", id, err)
		}
	}
	next := func() response {
		t.Helper()
		line, err := out.ReadBytes('\n') // the command's context bounds the wait
		if err != nil {
			t.Fatalf("read response: %v; stderr:\n%s", err, stderr.Bytes())
		}
		r := parseLine(t, line)
		if r.CallID == nil || !r.OK {
			t.Fatalf("response %s", line)
		}
		return r
	}

	// "first" cannot finish before "second" has run, so the two run at once
	// on one process. Which answer is written first is a race once "second"
	// signalled; both must come, each under its own call_id.
	send("first", map[string]any{"wait_for": "g1", "echo": 1})
	send("second", map[string]any{"signal": "g1", "echo": 2, "receipt": "applied"})
	a, b := next(), next()
	if *a.CallID == "first" {
		a, b = b, a
	}
	if *a.CallID != "second" || *b.CallID != "first" {
		t.Fatalf("answers for %q and %q, want second and first", *a.CallID, *b.CallID)
	}
	r := b
	if got, want := r.childOutput(t).PID, cmd.Process.Pid; got != want {
		t.Fatalf("served by pid %d, want %d", got, want)
	}

	// Close stdin while "third" waits for "fourth": both are still answered.
	send("third", map[string]any{"wait_for": "g2"})
	send("fourth", map[string]any{"signal": "g2"})
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range 2 {
		r := next()
		got[*r.CallID] = true
		if pid := r.childOutput(t).PID; pid != cmd.Process.Pid {
			t.Fatalf("served by pid %d, want %d", pid, cmd.Process.Pid)
		}
	}
	if !got["third"] || !got["fourth"] {
		t.Fatalf("answers %v, want third and fourth", got)
	}
	// Read to EOF before Wait, which closes the pipe.
	if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
		t.Fatalf("after the answers: %q, %v; want EOF", rest, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("handler exited with %v; stderr:\n%s", err, stderr.Bytes())
	}
}

// TestEndToEndOneShotStdinOpen checks that a one-shot handler answers and
// exits after one request even when the host keeps stdin open.
func TestEndToEndOneShotStdinOpen(t *testing.T) {
	bin := buildTestHandler(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = handlerEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(mustJSON(t, newRequest("c1", map[string]any{"echo": "x"}, false))); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(stdout) // EOF only once the handler exits
	if err != nil {
		t.Fatal(err)
	}
	if r := parseLine(t, all); !r.OK || r.childOutput(t).Echo != "x" {
		t.Fatalf("response %s", all)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("handler exited with %v", err)
	}
}
