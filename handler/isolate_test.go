//go:build linux

package handler_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// listen opens a TCP listener on 127.0.0.1 that accepts and closes
// connections until the test ends.
func listen(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// Through the helper (how a daemon that is not root starts them), a
// handler without the grant has no network, keeps the daemon's ids, and
// sees exactly the binding's environment; one with the grant is started
// directly and reaches the listener.
func TestHelperIsolatesTheNetwork(t *testing.T) {
	handler.UseIsolationHelper(t)
	addr := listen(t)
	for _, tt := range []struct {
		grants    []string
		connected bool
	}{{nil, false}, {[]string{handler.GrantNetwork}, true}} {
		r := mustProcess(t, func(s *handler.ProcessSpec) { s.Grants = tt.grants }, "dial", addr)
		res := r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
		if !res.OK {
			t.Fatalf("grants %v: %+v %v", tt.grants, res, res.Err)
		}
		if got, want := string(res.Output), `{"connected":`+map[bool]string{true: "true", false: "false"}[tt.connected]+`}`; got != want {
			t.Fatalf("grants %v: output %s, want %s", tt.grants, got, want)
		}
	}

	r := mustProcess(t, nil, "ids")
	res := r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
	var ids struct {
		UID, GID int
		Up       []string
	}
	if err := json.Unmarshal(res.Output, &ids); !res.OK || err != nil {
		t.Fatalf("ids: %+v %v %v", res, res.Err, err)
	}
	if ids.UID != os.Getuid() || ids.GID != os.Getgid() || len(ids.Up) != 0 {
		t.Fatalf("handler runs as %d:%d with interfaces up %v, want %d:%d and none", ids.UID, ids.GID, ids.Up, os.Getuid(), os.Getgid())
	}

	t.Setenv("TOUBA_TEST_DAEMON_MARKER", "daemon-only")
	r = mustProcess(t, func(s *handler.ProcessSpec) { s.Secrets = map[string]string{"API_TOKEN": "v"} }, "env")
	res = r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
	var env []string
	if err := json.Unmarshal(res.Output, &env); !res.OK || err != nil {
		t.Fatalf("env: %+v %v %v", res, res.Err, err)
	}
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "PATH", "LANG", "TZ", "API_TOKEN":
		default:
			t.Fatalf("handler sees %q; environment %q", k, env)
		}
	}
}

// The helper relays how its handler ended: an exit code, or the same
// signal.
func TestHelperRelaysTheExitStatus(t *testing.T) {
	handler.UseIsolationHelper(t)
	for mode, want := range map[string]string{"exit1": "exit status 1", "signal": "signal: terminated"} {
		r := mustProcess(t, nil, mode)
		res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), func() error { return nil })
		if errCode(res) != touba.EHandlerFailed || res.Outcome != touba.EffectUnknown || !strings.Contains(res.Err.Message, want) {
			t.Fatalf("%s: result %+v %v, want HandlerFailed, unknown, %q", mode, res, res.Err, want)
		}
	}
}

// A handler the helper cannot start was never called: not_applied, with
// the reason, and the dispatched hook never ran.
func TestHelperStartFailureIsNotApplied(t *testing.T) {
	handler.UseIsolationHelper(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]string{filepath.Join(dir, "missing"): "no such file", notExec: "permission denied"} {
		r, err := handler.NewProcess(handler.ProcessSpec{Command: cmd, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var h hook
		res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), h.fn)
		if errCode(res) != touba.EHandlerFailed || res.Outcome != touba.EffectNotApplied || h.n != 0 ||
			!strings.Contains(res.Err.Message, want) {
			t.Fatalf("%s: result %+v %v, hook %d; want HandlerFailed, not_applied, %q", cmd, res, res.Err, h.n, want)
		}
	}
}

// The helper stays in the handler's process group: a timeout's group kill
// ends the handler and its grandchild, not only the helper.
func TestHelperTimeoutKillsTheGroup(t *testing.T) {
	handler.UseIsolationHelper(t)
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	r := mustProcess(t, func(s *handler.ProcessSpec) { s.Timeout = 2 * time.Second }, "spawn", pidFile)
	res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryReconcile), func() error { return nil })
	if errCode(res) != touba.EHandlerTimeout || res.Outcome != touba.EffectUnknown {
		t.Fatalf("result %+v %v, want HandlerTimeout, unknown", res, res.Err)
	}
	waitGone(t, readPID(t, pidFile))
}

// A persistent handler works through the helper too: several calls on
// one process, without network.
func TestHelperPersistent(t *testing.T) {
	handler.UseIsolationHelper(t)
	r := mustPersistent(t, sdkecho, nil)
	for i := range 3 {
		id := "call-" + string(rune('a'+i))
		res := r.Call(context.Background(), preq(t, id, map[string]any{"n": i}, true), func() error { return nil })
		if !res.OK {
			t.Fatalf("call %d: %+v %v", i, res, res.Err)
		}
	}
}

// A daemon without PATH, LANG and TZ, and a binding without secrets, give
// the handler an empty environment, not the daemon's (a nil exec.Cmd.Env
// would inherit it), directly and through the helper.
func TestEmptyHandlerEnvironment(t *testing.T) {
	for _, helper := range []bool{false, true} {
		if helper {
			handler.UseIsolationHelper(t)
		}
		t.Setenv("TOUBA_TEST_DAEMON_MARKER", "daemon-only")
		for _, name := range []string{"PATH", "LANG", "TZ"} {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
		r := mustProcess(t, nil, "env")
		res := r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
		var env []string
		if err := json.Unmarshal(res.Output, &env); !res.OK || err != nil {
			t.Fatalf("helper %v: %+v %v %v", helper, res, res.Err, err)
		}
		if len(env) != 0 {
			t.Fatalf("helper %v: handler environment %q, want none", helper, env)
		}
	}
}

// A handler without the network grant that means to leave its network
// namespace cannot: neither into its parent's (the daemon's when started
// directly, the helper's through it) nor init's, and so dials nothing. A
// root daemon that starts it in a bare CLONE_NEWNET leaves it
// CAP_SYS_ADMIN over the host's namespace, and setns(2) takes it straight
// back (it did before root's handlers got a user namespace of their own).
func TestIsolatedHandlerCannotJoinTheHostNetwork(t *testing.T) {
	if !handler.NetworkIsolation() {
		t.Skip("this host cannot isolate a handler's network")
	}
	addr := listen(t)
	for _, via := range []string{"as this daemon starts it", "through the helper"} {
		t.Run(via, func(t *testing.T) {
			if via == "through the helper" {
				useIsolationHelper(t)
			}
			method, _ := handler.IsolationMethod()
			r := mustProcess(t, nil, "escape", addr)
			res := r.Call(context.Background(), newRequest(t, `{}`, ""), func() error { return nil })
			if !res.OK {
				t.Fatalf("%+v %v", res, res.Err)
			}
			var out struct {
				Connected bool     `json:"connected"`
				Tried     []string `json:"tried"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatalf("output %s: %v", res.Output, err)
			}
			if out.Connected {
				t.Fatalf("isolated by %q, the handler reached %s after %q", method, addr, out.Tried)
			}
		})
	}
}
