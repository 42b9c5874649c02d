package durable_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// TestRepinSettlesProgramChanged (SPEC §2.3 reloads, issue 33 defect 3):
// an entry parked ProgramChanged (a reload renamed a step it completed)
// is refused by replay and resume without --repin, with a message that
// says to use it; --repin --dry-run lists what it keeps, runs again and
// drops; --repin --yes pins it to the running definition and it runs to
// done there, never parking again.
func TestRepinSettlesProgramChanged(t *testing.T) {
	t.Parallel()
	const sleep = 3 * time.Second
	w := newWorld(t, func(p program) { p.sleeps(sleep, 100*time.Millisecond) })
	w.start()
	b := w.post(refInvoice, "", invoiceFailedBody("evt_if_rp", "in_rp"))
	wb := w.waitSleeping(b, "wait_1")
	w.once("remind", b)
	p := readExample(t)
	p.trigger(refOrder)["retry"] = map[string]any{"max_attempts": 2, "initial_interval_ms": 50, "max_interval_ms": 100}
	p.sleeps(sleep, 100*time.Millisecond)
	p.step(refInvoice, "remind_1")["id"] = "first_reminder"
	w.reload(p)
	if time.Now().After(*wb.WakeAt) {
		t.Fatalf("the reload came after the sleep's end: inconclusive, make the sleep longer")
	}
	if e := w.waitStatus(b, touba.StatusParked); e.ErrorCode != touba.EProgramChanged {
		t.Fatalf("parked with %s, want %s", e.ErrorCode, touba.EProgramChanged)
	}

	stdout, _, err := w.cli("queue", "replay", b)
	var rep admin.ReplayReport
	if err == nil || json.Unmarshal(stdout, &rep) != nil || len(rep.Items) != 1 || rep.Items[0].Replayed ||
		!strings.Contains(rep.Items[0].Reason, "--repin") {
		t.Fatalf("replay without --repin: err %v, %s; want refused, naming --repin", err, stdout)
	}
	if _, stderr, err := w.cli("queue", "resume", b, "--from", "wait_1"); err == nil || !strings.Contains(stderr, "--repin") {
		t.Fatalf("resume without --repin: err %v, stderr %q; want refused, naming --repin", err, stderr)
	}
	if _, stderr, err := w.cli("queue", "replay", b, "--repin"); err == nil || !strings.Contains(stderr, "--yes") {
		t.Fatalf("replay --repin off a terminal without --yes: err %v, stderr %q; want refused, asking for --yes", err, stderr)
	}
	if e := w.show(b); e.Status != touba.StatusParked {
		t.Fatalf("refusals changed the entry: %s", e.Status)
	}

	w.cliJSON(&rep, "queue", "replay", b, "--repin", "--dry-run")
	if len(rep.Items) != 1 || rep.Items[0].Repin == nil {
		t.Fatalf("dry run: %+v, want the entry's plan", rep.Items)
	}
	plan := rep.Items[0].Repin
	if !slices.Contains(plan.Again, "first_reminder") || !slices.Contains(plan.Dropped, "remind_1") || slices.Contains(plan.Kept, "remind_1") {
		t.Fatalf("plan %+v: want first_reminder run again and remind_1 dropped", plan)
	}
	if e := w.show(b); e.Status != touba.StatusParked {
		t.Fatalf("the dry run changed the entry: %s", e.Status)
	}

	w.cliJSON(&rep, "queue", "replay", b, "--repin", "--yes")
	if len(rep.Items) != 1 || !rep.Items[0].Replayed {
		t.Fatalf("replay --repin: %+v", rep.Items)
	}
	e := w.waitStatus(b, touba.StatusDone)
	if e.output(t, "first_reminder") == nil {
		t.Fatalf("the repinned entry has no output of first_reminder")
	}
	// remind_1 (before the reload), then first_reminder, remind_2 and
	// remind_3 under the running definition: each once.
	if n := len(w.callsOf("remind", b)); n != 4 {
		t.Fatalf("%d reminders, want 4 (remind_1, then first_reminder, remind_2, remind_3)", n)
	}
}
