package handler_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/touba/touba-trigger/handler"
)

// The test handler programs, built once by TestMain: fixture (one-shot,
// standard library), pfixture (persistent, standard library) and sdkecho
// (the Go SDK, either mode).
var fixture, pfixture, sdkecho string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "touba-handler-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = "/usr/local/go/bin/go"
		}
		fixture = filepath.Join(dir, "fixture")
		pfixture = filepath.Join(dir, "persistent")
		sdkecho = filepath.Join(dir, "sdkecho")
		for _, b := range []struct{ out, pkg string }{
			{fixture, "./testdata/fixture"}, {pfixture, "./testdata/persistent"}, {sdkecho, "./testdata/sdkecho"},
		} {
			cmd := exec.Command(gobin, "build", "-o", b.out, b.pkg)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "build", b.pkg+":", err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

const testTool = "tool:test/Echo"

// newRequest returns a request for testTool; with retryMode set it carries
// an effect, as an external_write binding's call does.
func newRequest(tb testing.TB, input, retryMode string) *handler.Request {
	tb.Helper()
	req := &handler.Request{
		Protocol:  handler.Protocol,
		Operation: handler.OperationInvoke,
		ToolRef:   testTool,
		Input:     json.RawMessage(input),
		Context: handler.Context{
			TriggerRef: "trigger:test/Orders", EventID: "ev-1", QueueID: "q-1",
			RunID: "run-1", CallID: "call-1", Attempt: 1, Grants: []string{},
		},
	}
	if retryMode != "" {
		fp, err := handler.Fingerprint(req.ToolRef, req.Operation, req.Input)
		if err != nil {
			tb.Fatal(err)
		}
		req.Context.Effect = &handler.Effect{Scope: "q-1", EffectID: "q-1:create", Fingerprint: fp, RetryMode: retryMode, Attempt: 1}
	}
	return req
}

// hook counts the calls of a dispatched hook and returns err from it.
type hook struct {
	n   int
	err error
}

func (h *hook) fn() error {
	h.n++
	return h.err
}

// errCode is the code of a Result's error, or "".
func errCode(r *handler.Result) string {
	if r.Err == nil {
		return ""
	}
	return r.Err.Code
}
