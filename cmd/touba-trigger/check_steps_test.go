package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/trigger"
)

// check prints each durable step, the cancel_on entries, who awaits or
// cancels through a trigger, and every trigger's digest prefix, on the
// four flows of issue 25.
func TestCheckPrintsDurableSteps(t *testing.T) {
	path := filepath.Join("..", "..", "trigger", "testdata", "programs", "durable-flows.json")
	program, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := trigger.ParseProgram("p.json", program)
	if err != nil {
		t.Fatal(err)
	}
	bindings := map[string]any{}
	for _, ref := range p.ToolRefs() {
		bindings[ref] = map[string]any{"handler": map[string]string{"kind": "accounting_stub"}, "effect_contract": map[string]string{"kind": "none"}}
	}
	manifest, _ := json.Marshal(map[string]any{"manifest_version": "touba-manifest-v1", "bindings": bindings})
	t.Setenv("STRIPE_WEBHOOK_SECRET", "k-1234567890")
	out, errOut, err := runCheckFiles(t, string(program), string(manifest))
	if err != nil {
		t.Fatalf("check: %v %s", err, errOut)
	}
	for _, want := range []string{
		"  trigger:shop/Checkout  POST /triggers/shop/Checkout  verify=none  steps=2  weight=10\n" +
			"    event_id: body /checkout_id (optional)  redelivery=acknowledge\n" +
			`    step paid: wait_for trigger:stripe/PaymentSucceeded on=/body/data/object/metadata/order_id match={"$ref":"/event/body/order_id"} timeout=1d (24h0m0s) on_timeout=continue` + "\n" +
			"    step settle: tool:shop/SettleOrder\n",
		"  trigger:stripe/PaymentSucceeded  POST /triggers/stripe/PaymentSucceeded  verify=stripe  steps=0  weight=10\n",
		"    awaited by trigger:shop/Checkout#paid (offers the value at /body/data/object/metadata/order_id)\n",
		"    step remind1: tool:billing/SendReminder\n    step wait1: sleep 3d (72h0m0s)\n    step remind2: tool:billing/SendReminder\n",
		`    cancel_on[0]: by trigger:billing/InvoicePaid when on /body/data/object/id equals match {"$ref":"/event/body/invoice_id"}` + "\n",
		"    cancels entries of trigger:billing/InvoiceOverdue (the value at /body/data/object/id)\n",
		`    step settle: sleep until {"$ref":"/steps/export/output/ready_at"}` + "\n",
		`    step holiday: sleep until "2026-12-24T09:00:00+01:00"` + "\n",
		// A trigger of tool steps only, named by nothing: as before.
		"  trigger:shop/Order  POST /triggers/shop/Order  verify=none  steps=4  weight=10\n" +
			"    event_id: header X-Touba-Event-Id (optional)  redelivery=acknowledge\n" +
			"    concurrency key=/event/body/customer_id max=1\n" +
			"digests (the program_digest of new entries):\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks\n%s\nin\n%s", want, out)
		}
	}
	for _, tr := range p.Triggers {
		if line := "  " + tr.Ref + "  " + tr.Digest[:12] + "\n"; !strings.Contains(out, line) {
			t.Errorf("check output lacks the digest line %q", line)
		}
	}
	if strings.Contains(out, "no steps, and no wait_for") {
		t.Errorf("an awaited trigger with no steps is warned about:\n%s", out)
	}
}

// A wait without a timeout, and a trigger with no steps that nothing
// names, which check warns about.
func TestCheckPrintsWaitWithoutTimeout(t *testing.T) {
	out := checkOutput(t, `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:a", "source": {"kind": "webhook"},
	   "steps": [{"id": "w", "wait_for": {"trigger": "trigger:b", "match": "lit", "on": "/headers/x-k"}}, {"id": "s", "sleep": {"ms": 1500}}]},
	  {"ref": "trigger:b", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:idle", "source": {"kind": "webhook"}, "steps": []}]}`)
	for _, want := range []string{
		`    step w: wait_for trigger:b on=/headers/x-k match="lit" timeout=none` + "\n    step s: sleep 1.5s\n",
		"warning: trigger:idle: no steps, and no wait_for or cancel_on names it: its entries do nothing\n",
		// No timeout is longer than --history (SPEC §8.1).
		"warning: trigger:a: step w waits for trigger:b with timeout none, longer than --history 2160h0m0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks\n%s\nin\n%s", want, out)
		}
	}
	if n := strings.Count(out, "warning: "); n != 2 {
		t.Errorf("%d warnings:\n%s", n, out)
	}
}

// check --history warns of a schedule whose period is more than half the
// window (issue 42: a per-minute cron under --history 15s), not of one
// whose ticks stay in the queue until the next ones.
func TestCheckWarnsOfShortHistoryForSchedules(t *testing.T) {
	dir := t.TempDir()
	pp, mp := filepath.Join(dir, "p.json"), filepath.Join(dir, "m.json")
	if err := os.WriteFile(pp, []byte(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:every/Minute", "source": {"kind": "schedule", "cron": "* * * * *", "catch_up": "last"}, "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:every/Five", "source": {"kind": "schedule", "cron": "*/5 * * * *"}, "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mp, []byte(`{"manifest_version": "touba-manifest-v1", "bindings": {
	  "tool:t/Do": {"handler": {"kind": "accounting_stub"}, "effect_contract": {"kind": "none"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		history string
		want    []string
	}{
		{"15s", []string{`warning: trigger:every/Minute: --history 15s is shorter than twice the period 1m0s of its schedule "* * * * *"`,
			`warning: trigger:every/Five: --history 15s is shorter than twice the period 5m0s of its schedule "*/5 * * * *"`}},
		{"5m", []string{`warning: trigger:every/Five: --history 5m0s is shorter than twice the period 5m0s`}},
		{"10m", nil},
	} {
		var out, errOut bytes.Buffer
		if err := runCheck(context.Background(), []string{"--manifest", mp, "--history", tc.history, pp}, &out, &errOut); err != nil {
			t.Fatalf("check --history %s: %v %s", tc.history, err, errOut.String())
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("check --history %s lacks %q:\n%s", tc.history, want, out.String())
			}
		}
		if n := strings.Count(out.String(), "warning: "); n != len(tc.want) {
			t.Errorf("check --history %s: %d warnings, want %d:\n%s", tc.history, n, len(tc.want), out.String())
		}
	}
}
