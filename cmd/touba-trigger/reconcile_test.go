package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/testkit"
)

type opEffect struct {
	Scope      string          `json:"scope"`
	EffectID   string          `json:"effect_id"`
	Operation  string          `json:"operation"`
	State      string          `json:"state"`
	Attempts   int             `json:"attempts"`
	ReceiptRef string          `json:"receipt_ref"`
	Result     json.RawMessage `json:"result"`
}

type opEntry struct {
	QueueID   string `json:"queue_id"`
	Status    string `json:"status"`
	ErrorCode string `json:"error_code"`
	Operator  []struct {
		Action   string `json:"action"`
		Outcome  string `json:"outcome"`
		Operator string `json:"operator"`
	} `json:"operator_events"`
}

// parkCharge sends one order and waits until its run is parked on the
// charge, whose outcome is unknown, as an operator finds it.
func parkCharge(t *testing.T, e *opEnv, d *testkit.Server) string {
	t.Helper()
	status, q := testkit.Post(t, d.URL()+"/triggers/ops/Orders", "order-1", `{"order_id": 1}`)
	if status != 202 {
		t.Fatalf("post: %d", status)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "parked" }, "the run to park")
	var parked []opEntry
	e.cliJSON(t, &parked, "queue", "ls", "--status", "parked")
	if len(parked) != 1 || parked[0].QueueID != q || parked[0].ErrorCode != "EffectReconciliationRequired" {
		t.Fatalf("queue ls --status parked: %+v", parked)
	}
	var unknown []opEffect
	e.cliJSON(t, &unknown, "effects", "ls", "--state", "unknown")
	if len(unknown) != 1 || unknown[0].EffectID != q+":charge" {
		t.Fatalf("effects ls --state unknown: %+v", unknown)
	}
	if n := len(e.handlerCalls(t, "tool:ops/Charge")); n != 1 {
		t.Fatalf("charge calls=%d before the verdict, want 1", n)
	}
	return q
}

// TestResolveAppliedGoesOnWithoutCallingAgain: the operator finds the
// charge happened; the run goes on from the next step without calling the
// charge again, and the next step's $ref sees the operator's result.
func TestResolveAppliedGoesOnWithoutCallingAgain(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	d := e.start(t)
	q := parkCharge(t, e, d)

	result := filepath.Join(e.dir, "result.json")
	os.WriteFile(result, []byte(`{"charge_id": "ch_1"}`), 0o600)
	var res struct {
		Effect   opEffect `json:"effect"`
		Replayed bool     `json:"replayed"`
	}
	e.cliJSON(t, &res, "effects", "resolve", q, q+":charge", "--applied", "--receipt-ref", "ch_1", "--result", result)
	if !res.Replayed || res.Effect.State != "applied" || res.Effect.ReceiptRef != "ch_1" {
		t.Fatalf("resolve: %+v", res)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the run to finish")

	if n := len(e.handlerCalls(t, "tool:ops/Charge")); n != 1 {
		t.Fatalf("charge calls=%d after resolve --applied, want 1 (no second call)", n)
	}
	notify := e.handlerCalls(t, "tool:ops/Notify")
	if len(notify) != 1 {
		t.Fatalf("notify calls=%d, want 1", len(notify))
	}
	var in struct {
		Charge struct {
			ChargeID string `json:"charge_id"`
		} `json:"charge"`
	}
	if err := json.Unmarshal(notify[0].Input, &in); err != nil || in.Charge.ChargeID != "ch_1" {
		t.Fatalf("notify input %s does not carry the operator's result", notify[0].Input)
	}
	// An applied effect is never rewritten.
	code, _, errs := e.cli(t, "effects", "resolve", q, q+":charge", "--not-applied")
	if code != 1 || !strings.Contains(errs, "EffectNotUnknown") {
		t.Fatalf("second resolve: exit %d %s", code, errs)
	}
	var shown opEntry
	e.cliJSON(t, &shown, "queue", "show", q)
	if len(shown.Operator) != 2 || shown.Operator[0].Action != "effects.resolve" || shown.Operator[0].Outcome != "done" ||
		shown.Operator[1].Outcome != "refused" || !strings.Contains(shown.Operator[0].Operator, "admin socket") {
		t.Fatalf("operator events: %+v", shown.Operator)
	}
}

// TestResolveNotAppliedOnStoppedFiles: with the daemon stopped, the CLI
// opens the files itself; --not-applied makes the next run call the charge
// again with the same effect id.
func TestResolveNotAppliedOnStoppedFiles(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	d := e.start(t)
	q := parkCharge(t, e, d)
	if err := d.Stop(); err != nil {
		t.Fatalf("daemon stop: %v", err)
	}

	code, out, errs := e.cli(t, "queue", "ls", "--status", "parked")
	if code != 0 || !strings.Contains(out, q) || !strings.Contains(out, "EffectReconciliationRequired") {
		t.Fatalf("queue ls on files: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = e.cli(t, "effects", "resolve", q, q+":charge", "--not-applied")
	if code != 0 || !strings.Contains(out, "not_applied") || !strings.Contains(out, "pending again") {
		t.Fatalf("resolve on files: exit %d\n%s%s", code, out, errs)
	}
	var shown opEntry
	e.cliJSON(t, &shown, "queue", "show", q)
	if shown.Status != "pending" || len(shown.Operator) != 1 || !strings.Contains(shown.Operator[0].Operator, "no daemon") {
		t.Fatalf("entry after resolve on files: %+v", shown)
	}
	if _, err := os.Stat(e.journal + ".lock"); !os.IsNotExist(err) {
		t.Fatalf("the CLI left the journal lock behind: %v", err)
	}

	e.start(t)
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the run to finish")
	charges := e.handlerCalls(t, "tool:ops/Charge")
	if len(charges) != 2 {
		t.Fatalf("charge calls=%d after resolve --not-applied, want 2", len(charges))
	}
	for i, c := range charges {
		if c.EffectID != q+":charge" || c.Attempt != i+1 {
			t.Fatalf("charge call %d: effect %s attempt %d, want %s:charge attempt %d", i, c.EffectID, c.Attempt, q, i+1)
		}
	}
	if n := len(e.handlerCalls(t, "tool:ops/Notify")); n != 1 {
		t.Fatalf("notify calls=%d, want 1", n)
	}
}
