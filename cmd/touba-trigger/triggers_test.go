package main_test

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/touba/touba-trigger/internal/testkit"
)

// holdProgram has two triggers, each calling a tool of its own, so a test
// can tell which trigger's runs reached their handler.
const holdProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:ops/Held", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:ops/HeldWrite", "input": {"order": {"$ref": "/event/body"}}}]},
  {"ref": "trigger:ops/Free", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:ops/FreeWrite", "input": {"order": {"$ref": "/event/body"}}}]}]}`

const holdManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:ops/HeldWrite": {"handler": {"kind": "process", "command": "{{HANDLER}}", "args": ["{{CALLS}}", "ok"]},
    "grants": ["network"], "timeout_ms": 10000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}},
  "tool:ops/FreeWrite": {"handler": {"kind": "process", "command": "{{HANDLER}}", "args": ["{{CALLS}}", "ok"]},
    "grants": ["network"], "timeout_ms": 10000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

type holdEntry struct {
	QueueID  string `json:"queue_id"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
}

type holdTrigger struct {
	TriggerRef string `json:"trigger_ref"`
	Paused     bool   `json:"paused"`
	PausedBy   string `json:"paused_by"`
	Reason     string `json:"reason"`
	Pending    int64  `json:"pending"`
}

func (e *opEnv) trigger(t *testing.T, ref string) holdTrigger {
	t.Helper()
	var ts []holdTrigger
	e.cliJSON(t, &ts, "triggers", "ls")
	for _, tr := range ts {
		if tr.TriggerRef == ref {
			return tr
		}
	}
	t.Fatalf("triggers ls has no %s: %+v", ref, ts)
	return holdTrigger{}
}

// post sends one delivery and wants 202.
func postHold(t *testing.T, d *testkit.Daemon, name, event string) {
	t.Helper()
	if code, body := testkit.Post(t, d.URL()+"/triggers/"+name, event, fmt.Sprintf(`{"id": %q}`, event)); code != http.StatusAccepted {
		t.Fatalf("POST %s %s: %d %s, want 202", name, event, code, body)
	}
}

// freeRuns waits until n runs of the unpaused trigger reached its handler:
// the dispatcher leases oldest first, so by then it has passed over every
// entry of the paused trigger accepted before them.
func (e *opEnv) freeRuns(t *testing.T, n int) {
	t.Helper()
	testkit.WaitFor(t, opWait, func() bool { return len(e.handlerCalls(t, "tool:ops/FreeWrite")) >= n }, fmt.Sprintf("%d runs of ops/Free", n))
}

// A paused trigger (through the CLI on the admin socket of the real
// daemon) still answers 202 and runs nothing, while another trigger runs;
// its entries wait pending with no attempt spent. The pause survives a
// restart; resuming runs them, each at its first attempt.
func TestPauseSurvivesRestart(t *testing.T) {
	e := newOpEnv(t, holdProgram, holdManifest)
	d := e.serve(t)
	code, out, errs := e.cli(t, "triggers", "pause", "ops/Held", "--reason", "remote maintenance")
	if code != 0 || !strings.Contains(out, "trigger:ops/Held paused") {
		t.Fatalf("triggers pause: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := e.cli(t, "triggers", "pause", "ops/Held"); code != 0 || !strings.Contains(out, "already paused") {
		t.Fatalf("second pause: exit %d %s", code, out)
	}
	if code, _, errs := e.cli(t, "triggers", "pause", "ops/Nope"); code == 0 || !strings.Contains(errs, "not a trigger of the running program") {
		t.Fatalf("pause of an unknown trigger: exit %d %s", code, errs)
	}
	for i := range 3 {
		postHold(t, d, "ops/Held", fmt.Sprintf("held-%d", i))
	}
	postHold(t, d, "ops/Free", "free-0")
	e.freeRuns(t, 1)
	e.wantHeld(t, 3)

	d.Signal(syscall.SIGTERM)
	if code := d.Wait(opWait); code != 0 {
		t.Fatalf("daemon exit %d\n%s", code, d.Log())
	}
	if !strings.Contains(d.Log(), "operator.trigger.pause") {
		t.Fatalf("no audit line of the pause in the log:\n%s", d.Log())
	}
	// With no daemon, the CLI reads the pause from the queue file.
	if tr := e.trigger(t, "trigger:ops/Held"); !tr.Paused || tr.Pending != 3 {
		t.Fatalf("triggers ls on the files: %+v, want paused with 3 pending", tr)
	}
	d = e.serve(t)
	postHold(t, d, "ops/Held", "held-3")
	postHold(t, d, "ops/Free", "free-1")
	e.freeRuns(t, 2)
	e.wantHeld(t, 4)
	if tr := e.trigger(t, "trigger:ops/Held"); !tr.Paused || tr.Reason != "remote maintenance" || tr.PausedBy == "" {
		t.Fatalf("after a restart, triggers ls shows %+v, want paused with its reason and who", tr)
	}
	if _, out, _ := e.cli(t, "triggers", "ls"); !strings.Contains(out, "paused") || !strings.Contains(out, "remote maintenance") {
		t.Fatalf("triggers ls table:\n%s", out)
	}

	if code, out, errs := e.cli(t, "triggers", "resume", "trigger:ops/Held", "--reason", "remote back"); code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("triggers resume: exit %d\n%s%s", code, out, errs)
	}
	testkit.WaitFor(t, opWait, func() bool { return len(e.handlerCalls(t, "tool:ops/HeldWrite")) == 4 }, "the 4 held runs")
	var entries []holdEntry
	e.cliJSON(t, &entries, "queue", "ls", "--trigger", "ops/Held")
	for _, en := range entries {
		if en.Attempts != 1 {
			t.Fatalf("entry %s ran at attempt %d after the pause, want 1", en.QueueID, en.Attempts)
		}
	}
	if tr := e.trigger(t, "trigger:ops/Held"); tr.Paused {
		t.Fatalf("after resume: %+v", tr)
	}
}

// wantHeld checks that the paused trigger's n entries are pending, never
// leased, and that its handler saw nothing.
func (e *opEnv) wantHeld(t *testing.T, n int) {
	t.Helper()
	if calls := e.handlerCalls(t, "tool:ops/HeldWrite"); len(calls) != 0 {
		t.Fatalf("the paused trigger's handler was called %d times", len(calls))
	}
	var entries []holdEntry
	e.cliJSON(t, &entries, "queue", "ls", "--trigger", "ops/Held")
	if len(entries) != n {
		t.Fatalf("paused trigger has %d entries, want %d", len(entries), n)
	}
	for _, en := range entries {
		if en.Status != "pending" || en.Attempts != 0 {
			t.Fatalf("entry %s of the paused trigger is %s at attempt %d, want pending at 0", en.QueueID, en.Status, en.Attempts)
		}
	}
	if tr := e.trigger(t, "trigger:ops/Held"); tr.Pending != int64(n) {
		t.Fatalf("triggers ls: %+v, want %d pending", tr, n)
	}
}
