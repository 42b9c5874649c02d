package dispatcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/trigger"
)

// The durable steps' part of the world (SPEC §2.3): the queue as a wait
// store, and the real HTTP intake, which computes a delivery's offers,
// cancels, cancel keys and program digest.

// waits is the queue as the dispatcher's wait store (nil while the SQLite
// queue does not keep waits).
func (w *world) waits() touba.WaitStore {
	ws, _ := any(w.q).(touba.WaitStore)
	return ws
}

// mustWaits is waits, failing the test when the queue keeps none.
func (w *world) mustWaits() touba.WaitStore {
	w.tb.Helper()
	ws := w.waits()
	if ws == nil {
		w.tb.Fatal("the SQLite queue is not a touba.WaitStore")
	}
	return ws
}

// intakeConfig is the intake's configuration of the program on disk.
func (w *world) intakeConfig() *trigger.Config {
	w.tb.Helper()
	p, err := trigger.LoadProgram(w.path("program.air.json"))
	if err != nil {
		w.tb.Fatalf("program: %v", err)
	}
	c, err := trigger.NewConfig(p, func(string) (string, bool) { return "", false }, &secret.Set{})
	if err != nil {
		w.tb.Fatal(err)
	}
	return c
}

// notify wakes the running dispatcher, if any; the intake calls it after
// each new entry.
func (w *world) notify() {
	if d := w.dp.Load(); d != nil {
		d.Notify()
	}
}

// post sends body to trigger:name through the real intake and returns the
// entry's queue id; the answer must be 202-ish "enqueued".
func (w *world) post(name, body string) string {
	w.tb.Helper()
	return w.postWith(name, body, nil)
}

// postWith is post with headers besides Content-Type: application/json.
func (w *world) postWith(name, body string, headers map[string]string) string {
	w.tb.Helper()
	if w.in == nil {
		w.in = &trigger.Intake{Queue: w.q, Log: w.st, Enqueued: w.notify}
		w.in.SetConfig(w.intakeConfig())
		w.srv = httptest.NewServer(w.in.Router(nil))
		w.tb.Cleanup(w.srv.Close)
	}
	req, err := http.NewRequest(http.MethodPost, w.srv.URL+"/triggers/"+name, bytes.NewReader([]byte(body)))
	if err != nil {
		w.tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ans struct {
		QueueID string `json:"queue_id"`
		Status  string `json:"status"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || ans.Status != "enqueued" {
		w.tb.Fatalf("POST /triggers/%s %s: %d %s", name, body, resp.StatusCode, b)
	}
	return ans.QueueID
}

// waitsOf lists the waits of entry qid.
func (w *world) waitsOf(qid string) []touba.Wait {
	w.tb.Helper()
	ws, err := w.mustWaits().Waits(context.Background(), qid)
	if err != nil {
		w.tb.Fatal(err)
	}
	return ws
}

// runStatuses are the statuses of entry qid's n runs, oldest first.
func (w *world) runStatuses(qid string, n int) []string {
	w.tb.Helper()
	var out []string
	for _, r := range w.waitRuns(qid, n) {
		out = append(out, r.Status)
	}
	return out
}

// trig is one trigger of a durable test program: a webhook trigger named
// name with steps, and cancel_on when set.
func trig(name string, cancelOn []any, steps ...any) map[string]any {
	t := map[string]any{
		"ref":    "trigger:" + name,
		"source": map[string]any{"kind": "webhook"},
		"steps":  steps,
		"retry":  map[string]any{"max_attempts": 3, "initial_interval_ms": 10, "max_interval_ms": 50},
	}
	if cancelOn != nil {
		t["cancel_on"] = cancelOn
	}
	return t
}

// programOf is a touba-air-v1 program of ts.
func programOf(tb testing.TB, ts ...map[string]any) string {
	tb.Helper()
	return mustJSON(tb, map[string]any{"air_version": "touba-air-v1", "triggers": ts})
}

// toolStep is a step calling tool with input.
func toolStep(id, tool string, input any) map[string]any {
	return map[string]any{"id": id, "tool": tool, "input": input}
}

// sleepStep is a sleep step: {"ms": N} or {"until": ...}.
func sleepStep(id string, sleep map[string]any) map[string]any {
	return map[string]any{"id": id, "sleep": sleep}
}

// waitStep is a wait_for step awaiting trigger:name whose body field
// field equals the event body's field field; timeoutMS 0 waits forever.
func waitStep(id, name, field string, timeoutMS int, onTimeout string) map[string]any {
	wf := map[string]any{"trigger": "trigger:" + name, "match": ref("/event/body/" + field), "on": "/body/" + field}
	if timeoutMS > 0 {
		wf["timeout_ms"] = timeoutMS
	}
	if onTimeout != "" {
		wf["on_timeout"] = onTimeout
	}
	return map[string]any{"id": id, "wait_for": wf}
}

// cancelBy is a cancel_on entry: a delivery of trigger:name whose body
// field equals the entry's.
func cancelBy(name, field string) []any {
	return []any{map[string]any{"trigger": "trigger:" + name, "match": ref("/event/body/" + field), "on": "/body/" + field}}
}

// okInput is the test handler's input for an ok call recorded in calls.
func okInput(calls string, data any) map[string]any {
	in := map[string]any{"mode": "ok", "calls": calls}
	if data != nil {
		in["data"] = data
	}
	return in
}

// processManifest binds every tool of tools to the test handler process,
// effect contract none, except those in writes (external_write,
// idempotency_key).
func processManifest(tb testing.TB, tools []string, writes ...string) string {
	tb.Helper()
	var bs []binding
	for _, t := range tools {
		b := binding{Tool: t}
		for _, x := range writes {
			if x == t {
				b.Write = touba.RetryIdempotencyKey
			}
		}
		bs = append(bs, b)
	}
	return manifestOf(tb, bs...)
}

// touch creates the file at path (what a blocked handler waits for).
func touch(tb testing.TB, path string) {
	tb.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// tmp is a path in the test's folder.
func tmp(tb testing.TB, name string) string { return filepath.Join(tb.TempDir(), name) }
