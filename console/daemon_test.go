package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// daemon is the real daemon, in process, with its console on: one trigger
// whose first step posts to a remote that applies the write and answers
// 502 (so under reconcile the effect is unknown and the entry parks), and
// a second step that reads the first one's output.
type daemon struct {
	srv     *server.Server
	console string // base URL
	intake  string // base URL
	calls   atomic.Int32
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	d := &daemon{}
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		d.calls.Add(1)
		w.WriteHeader(http.StatusBadGateway) // applied, then failed to answer
	}))
	t.Cleanup(remote.Close)
	dir := t.TempDir()
	write := func(name string, v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	program := write("program.air.json", map[string]any{"air_version": "touba-air-v1", "triggers": []any{map[string]any{
		"ref":    "trigger:shop/Order",
		"source": map[string]any{"kind": "webhook", "event_id": map[string]any{"header": "x-touba-event-id"}},
		"steps": []any{
			map[string]any{"id": "charge", "tool": "tool:shop/Charge", "input": map[string]any{"order": map[string]any{"$ref": "/event/body"}}},
			map[string]any{"id": "notify", "tool": "tool:shop/Notify", "input": map[string]any{"charge": map[string]any{"$ref": "/steps/charge/output"}}},
		},
		"retry": map[string]any{"max_attempts": 3, "initial_interval_ms": 10, "max_interval_ms": 50},
	}}})
	manifest := write("touba.manifest.json", map[string]any{"manifest_version": "touba-manifest-v1", "bindings": map[string]any{
		"tool:shop/Charge": map[string]any{
			"handler": map[string]any{"kind": "webhook", "options": map[string]any{"url": remote.URL, "timeout_sec": 5},
				"credentials": map[string]any{"hmac_secret": map[string]string{"env": "CONSOLE_TEST_HOOK_KEY"}}},
			"effect_contract": map[string]any{"kind": "external_write", "retry_mode": "reconcile"},
		},
		"tool:shop/Notify": map[string]any{"handler": map[string]any{"kind": "accounting_stub"},
			"effect_contract": map[string]any{"kind": "none"}},
	}})
	t.Setenv("CONSOLE_TEST_HOOK_KEY", "hook-key-for-the-console-test")
	srv := runServer(t, server.Config{Program: program, Manifest: manifest,
		Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		Listen: "127.0.0.1:0", Workers: 2, MaxPending: 1000, ShutdownTimeout: 5 * time.Second,
		ConsoleListen: "127.0.0.1:0", ConsoleToken: []byte(token), Log: zerolog.Nop()})
	d.srv, d.console, d.intake = srv, "http://"+srv.ConsoleAddr().String(), "http://"+srv.Addr().String()
	return d
}

// send posts a delivery to the trigger and returns intake's status.
func (d *daemon) send(t *testing.T, eventID, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, d.intake+"/triggers/shop/Order", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Touba-Event-Id", eventID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitPage polls a console page with the bearer token until its body
// holds want, within a deadline.
func (d *daemon) waitPage(t *testing.T, path, want string) string {
	t.Helper()
	var body string
	testkit.WaitForReport(t, 30*time.Second, testkit.Every(50*time.Millisecond, func() bool {
		_, body = plain(t, http.MethodGet, d.console+path, map[string]string{"Authorization": "Bearer " + token})
		return strings.Contains(body, want)
	}), fmt.Sprintf("%s to show %q", path, want), func() { t.Logf("%s shows:\n%s", path, body) })
	return body
}

// waitParked waits until the run is parked, not only its effect unknown:
// /parked lists an unknown effect as soon as the journal says so, while
// the run may still be recording its end; a verdict given then finds no
// parked entry to put back to pending.
func (d *daemon) waitParked(t *testing.T, queueID string) {
	t.Helper()
	d.waitPage(t, "/entries/"+queueID, `id="entry-status" class="st-parked">parked<`)
}

// TestDaemonConsole: the console served by the real daemon settles a
// parked run over HTTP (bearer token) and the run finishes done; the
// shutdown stops the console listener too.
func TestDaemonConsole(t *testing.T) {
	d := startDaemon(t)
	if got := d.send(t, "ord-1", `{"n":1}`); got != http.StatusAccepted {
		t.Fatalf("intake: %d", got)
	}
	body := d.waitPage(t, "/parked", "tool:shop/Charge")
	m := regexp.MustCompile(`href="/effects/([^/"]+)/([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no effect link on /parked:\n%s", body)
	}
	d.waitParked(t, m[1])
	req, _ := http.NewRequest(http.MethodPost, d.console+"/effects/"+m[1]+"/"+m[2]+"/resolve",
		strings.NewReader(url.Values{"verdict": {"applied"}, "receipt_ref": {"ch_1"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("resolve: %d", resp.StatusCode)
	}
	d.waitPage(t, "/entries/"+m[1], `id="entry-status" class="st-done">done<`)
	if got := d.calls.Load(); got != 1 {
		t.Fatalf("remote called %d times, want 1: an applied verdict must not call it again", got)
	}
}

// runServer opens and runs a daemon in process on cfg until the test ends,
// and waits until it is ready.
func runServer(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.Open(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		srv.Close()
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon not ready within 30s")
	}
	return srv
}
