package dispatcher_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

const secretEnv = "DISPATCHER_TEST_TOKEN"

// secrets are the values tried: a plain one, and one that Go's JSON
// encoder writes escaped ("\u0026", "\u003c"), so a plain text search of
// a handler's output does not see it.
var secrets = []struct{ name, value string }{
	{"plain", "s3cr3t-7f1c9a0e-do-not-store"},
	{"json-escaped", "s3cr3t&<7f1c9a0e>-do-not-store"},
}

// TestSecretValueRefused (SPEC §5): a handler that echoes a secret value
// of the manifest in its output gets SecretValueRefused, the entry is
// parked, and nothing stored holds the value. A replay of an external
// write then finds it applied without a result (EffectResultUnavailable)
// and does not call again; a none-contract step just runs again.
func TestSecretValueRefused(t *testing.T) {
	for _, s := range secrets {
		for _, c := range []struct {
			name, mode, write, replayCode string
			calls                         int // after the replay
		}{
			{"external write", "echo_secret", touba.RetryIdempotencyKey, touba.EEffectResultUnavailable, 1},
			{"contract none", "echo_secret", "", touba.ESecretValueRefused, 2},
			// Written as \u escapes, the value is absent from the text
			// and present for any step that reads the output.
			{"external write, escaped", "echo_secret_escaped", touba.RetryIdempotencyKey, touba.EEffectResultUnavailable, 1},
			{"contract none, escaped", "echo_secret_escaped", "", touba.ESecretValueRefused, 2},
		} {
			t.Run(s.name+"/"+c.name, func(t *testing.T) {
				billCalls := filepath.Join(t.TempDir(), "bill.calls")
				in := map[string]any{"mode": c.mode, "secret_env": "API_TOKEN", "calls": billCalls}
				w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
					manifestOf(t, binding{Tool: toolW, Write: c.write, Secrets: map[string]string{"API_TOKEN": secretEnv}}),
					map[string]string{secretEnv: s.value}, true)
				qid := w.enqueue(trigName, `{}`, nil)
				wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, touba.ESecretValueRefused, 1)
				if _, ok := w.steps(qid)["bill"]; ok {
					t.Fatal("an output holding a secret was checkpointed")
				}
				if eff := w.effect(qid, "bill"); c.write != "" &&
					(eff.State != touba.EffectApplied || eff.Result != nil || eff.ErrorCode != touba.ESecretValueRefused) {
					t.Fatalf("effect %+v, want applied, no result, code %s", eff, touba.ESecretValueRefused)
				}
				w.replay(qid)
				wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, c.replayCode, 1)
				if got := len(calls(t, billCalls)); got != c.calls {
					t.Fatalf("%d calls, want %d", got, c.calls)
				}
				w.waitRuns(qid, 2)
				w.close()
				noSecretIn(t, w.dir, s.value, "queue.sqlite", "state.sqlite", "journal.sqlite")
			})
		}
	}
}

// TestSecretValueRefusedStub: the accounting stub echoes its input, here
// a secret the event carried, so its result cannot be stored either.
func TestSecretValueRefusedStub(t *testing.T) {
	for _, s := range secrets {
		t.Run(s.name, func(t *testing.T) {
			// Only a process handler has secrets; its step is never reached.
			w := newWorld(t, program(t, 3, step{"bill", toolW, map[string]any{"token": ref("/event/body/token")}},
				step{"then", toolThen, map[string]any{"mode": "ok"}}),
				manifestOf(t, binding{Tool: toolW, Stub: true, Write: touba.RetryIdempotencyKey},
					binding{Tool: toolThen, Secrets: map[string]string{"API_TOKEN": secretEnv}}),
				map[string]string{secretEnv: s.value}, true)
			qid := w.enqueue(trigName, mustJSON(t, map[string]string{"token": s.value}), nil)
			wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, touba.ESecretValueRefused, 1)
			w.replay(qid)
			wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, touba.EEffectResultUnavailable, 1)
			if got, want := w.stubs.Stub(toolW).Calls(), 1; got != want {
				t.Fatalf("stub called %d times, want %d", got, want)
			}
			w.waitRuns(qid, 2)
			w.close()
			// The queue holds the body the sender sent; nothing else may.
			noSecretIn(t, w.dir, s.value, "state.sqlite", "journal.sqlite")
		})
	}
}

// TestSecretInErrorMessage: a handler's error message that holds a secret
// value is an error the daemon must not store (SPEC §5: "errors never
// hold a resolved secret value").
func TestSecretInErrorMessage(t *testing.T) {
	for _, s := range secrets {
		for _, write := range []string{touba.RetryIdempotencyKey, ""} {
			t.Run(s.name+"/"+write, func(t *testing.T) {
				billCalls := filepath.Join(t.TempDir(), "bill.calls")
				in := map[string]any{"mode": "fail_secret", "code": touba.EWebhookRejected, "secret_env": "API_TOKEN", "calls": billCalls}
				w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
					manifestOf(t, binding{Tool: toolW, Write: write, Secrets: map[string]string{"API_TOKEN": secretEnv}}),
					map[string]string{secretEnv: s.value}, true)
				qid := w.enqueue(trigName, `{}`, nil)
				// The code holds no secret: it stays the public error.
				wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EWebhookRejected, 1)
				w.waitRuns(qid, 1)
				w.close()
				noSecretIn(t, w.dir, s.value, "queue.sqlite", "state.sqlite", "journal.sqlite")
			})
		}
	}
}

// noSecretIn fails the test when a file of dir whose name begins with one
// of prefixes (the SQLite file, its -wal and -shm) holds secret as written
// or in the forms JSON may encode it in (escaped for HTML, or every
// character as a \u escape).
func noSecretIn(tb testing.TB, dir, secret string, prefixes ...string) {
	tb.Helper()
	forms := [][]byte{[]byte(secret)}
	if b, err := json.Marshal(secret); err == nil {
		forms = append(forms, bytes.Trim(b, `"`))
	}
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(secret); err == nil {
		forms = append(forms, bytes.Trim(bytes.TrimSpace(plain.Bytes()), `"`))
	}
	var escaped bytes.Buffer
	for _, r := range secret {
		fmt.Fprintf(&escaped, "\\u%04x", r)
	}
	forms = append(forms, escaped.Bytes())
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	scanned := 0
	for _, e := range entries {
		match := false
		for _, p := range prefixes {
			match = match || strings.HasPrefix(e.Name(), p)
		}
		if !match || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		scanned++
		for _, f := range forms {
			if bytes.Contains(data, f) {
				tb.Errorf("%s holds the secret value (as %q)", e.Name(), f)
			}
		}
	}
	if scanned < len(prefixes) {
		tb.Fatalf("scanned %d files, want at least %d", scanned, len(prefixes))
	}
}
