package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
	"github.com/touba/touba-trigger/tracing"
)

// lockedBuffer is the daemon's log, written from its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWebhookURLSecretIsNotShown: a binding's webhook URL carries its
// secret in the path and the query (as Slack's incoming webhooks do); the
// remote refuses every connection, so the call is not applied and the run
// fails with the transport's error. The console's pages, the admin API's JSON
// (what `queue show --json` and `effects ls --json` print), the daemon's
// log at debug level and every recorded span then name the remote's host,
// and hold nothing of the path or the query.
func TestWebhookURLSecretIsNotShown(t *testing.T) {
	const (
		secretPath  = "/services/T0SECRET/B0SECRET/XSECRETPATHx"
		secretQuery = "token=XSECRETQUERYx"
	)
	// Nothing listens there: every try is refused, so the call is not
	// applied and the run fails with the transport's error, which Go's
	// client words with the whole URL quoted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close()
	hookURL := "http://" + host + secretPath + "?" + secretQuery

	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "rd") // a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
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
		"steps":  []any{map[string]any{"id": "notify", "tool": "tool:shop/Notify", "input": map[string]any{"order": map[string]any{"$ref": "/event/body"}}}},
		"retry":  map[string]any{"max_attempts": 1},
	}}})
	manifest := write("touba.manifest.json", map[string]any{"manifest_version": "touba-manifest-v1", "bindings": map[string]any{
		"tool:shop/Notify": map[string]any{
			"handler": map[string]any{"kind": "webhook", "options": map[string]any{"url": hookURL, "timeout_sec": 5},
				"credentials": map[string]any{"hmac_secret": map[string]string{"env": "REDACT_TEST_HOOK_KEY"}}},
			"effect_contract": map[string]any{"kind": "external_write", "retry_mode": "reconcile"},
		},
	}})
	t.Setenv("REDACT_TEST_HOOK_KEY", "hook-key-for-the-redaction-test")
	var logs lockedBuffer
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	socket := filepath.Join(sockDir, "admin.sock")
	srv := runServer(t, server.Config{Program: program, Manifest: manifest,
		Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		Listen: "127.0.0.1:0", AdminSocket: socket, Workers: 1, MaxPending: 100, ShutdownTimeout: 5 * time.Second,
		ConsoleListen: "127.0.0.1:0", ConsoleToken: []byte(token),
		Log: zerolog.New(&logs).Level(zerolog.DebugLevel), Tracing: tracing.WithProvider(tp)})
	d := &daemon{srv: srv, console: "http://" + srv.ConsoleAddr().String(), intake: "http://" + srv.Addr().String()}
	if got := d.send(t, "ord-1", `{"n":1}`); got != http.StatusAccepted {
		t.Fatalf("intake: %d", got)
	}
	// The call tries 6 times with the webhook's own backoff (0.5s, 1s,
	// ... with jitter), about 15 seconds, then the run fails.
	var queueID, body string
	testkit.WaitForReport(t, 2*time.Minute, testkit.Every(200*time.Millisecond, func() bool {
		_, body = plain(t, http.MethodGet, d.console+"/entries?status=failed", map[string]string{"Authorization": "Bearer " + token})
		if m := regexp.MustCompile(`href="/entries/([^"?]+)"`).FindStringSubmatch(body); m != nil {
			queueID = m[1]
		}
		return queueID != ""
	}), "a failed entry", func() { t.Logf("the failed entries' page:\n%s", body) })
	// The console: the entry's run history shows the error, and names
	// the host.
	var pages strings.Builder
	for _, p := range []string{"/", "/entries", "/entries?status=failed", "/entries/" + queueID} {
		_, b := plain(t, http.MethodGet, d.console+p, map[string]string{"Authorization": "Bearer " + token})
		pages.WriteString(b)
	}
	entryPage := d.waitPage(t, "/entries/"+queueID, "webhook unreachable")
	mustRedact(t, "the console's entry page", entryPage, host, secretPath, secretQuery)
	mustRedact(t, "the console's pages", pages.String(), host, secretPath, secretQuery)

	// The admin API, as the CLI reads it.
	admin := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", socket)
	}}}
	var api strings.Builder
	for _, p := range []string{"/v1/entries/" + queueID, "/v1/effects?scope=" + queueID, "/v1/entries"} {
		resp, err := admin.Get("http://admin" + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("admin GET %s: %d %s", p, resp.StatusCode, b)
		}
		api.Write(b)
	}
	mustRedact(t, "the admin API's JSON", api.String(), host, secretPath, secretQuery)

	// The spans: the call's status says where the call went.
	var spans strings.Builder
	var call string
	for _, s := range rec.Ended() {
		line := fmt.Sprintf("%s status=%q attrs=%v", s.Name(), s.Status().Description, s.Attributes())
		for _, ev := range s.Events() {
			line += fmt.Sprintf(" event=%s %v", ev.Name, ev.Attributes)
		}
		spans.WriteString(line + "\n")
		if s.Name() == tracing.SpanCall {
			call = s.Status().Description
		}
	}
	mustRedact(t, "the handler call's span status", call, host, secretPath, secretQuery)
	mustRedact(t, "the spans", spans.String(), host, secretPath, secretQuery)

	// The log, at debug level, start-up lines included.
	mustRedact(t, "the log", logs.String(), host, secretPath, secretQuery)
}

// mustRedact fails when s holds any segment of the secret path or the
// query, or does not name host.
func mustRedact(t *testing.T, what, s, host, path, query string) {
	t.Helper()
	parts := append(strings.Split(strings.Trim(path, "/"), "/")[1:], strings.Split(query, "=")[1])
	for _, p := range parts {
		if strings.Contains(s, p) {
			t.Errorf("%s holds %q of the webhook URL:\n%s", what, p, s)
		}
	}
	if !strings.Contains(s, host) {
		t.Errorf("%s does not name the host %s:\n%s", what, host, s)
	}
}
