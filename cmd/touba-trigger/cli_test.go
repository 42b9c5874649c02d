package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// TestReplaysSayWhatTheyDid: a replay of a done entry does nothing and
// says how to get a real re-run; following that advice runs the event
// again as a new entry; a compensation is its own effect.
func TestReplaysSayWhatTheyDid(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	os.WriteFile(e.marker, []byte("no dying here"), 0o600) // the charge answers at once
	d := e.start(t)
	url := d.URL() + "/triggers/ops/Orders"
	status, q := testkit.Post(t, url, "order-7", `{"order_id": 7}`)
	if status != 202 {
		t.Fatalf("post: %d", status)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the run to finish")
	// The sender redelivers: acknowledged (200 consumed), nothing re-run,
	// and logged as TriggerReplayRejected with its body.
	if status, got := testkit.Post(t, url, "order-7", `{"order_id": 7}`); status != 200 || got != q {
		t.Fatalf("redelivery: %d %s", status, got)
	}
	var rows []struct {
		DeliveryID string `json:"delivery_id"`
		QueueID    string `json:"queue_id"`
		BodyStored bool   `json:"body_stored"`
	}
	testkit.WaitFor(t, opWait, func() bool {
		e.cliJSON(t, &rows, "deliveries", "ls", "--rejected", "--code", "TriggerReplayRejected", "--since", "1h")
		return len(rows) == 1
	}, "the redelivery in the log")
	if rows[0].QueueID != q || !rows[0].BodyStored {
		t.Fatalf("delivery row: %+v", rows[0])
	}
	delivery := rows[0].DeliveryID

	// queue replay of a done entry: nothing done, exit 1, and the way out.
	code, out, _ := e.cli(t, "queue", "replay", q, "no-such-entry")
	if code != 1 || !strings.Contains(out, "entry is done") || !strings.Contains(out, "deliveries replay "+delivery+" --new-event-id") ||
		!strings.Contains(out, "no-such-entry  not replayed: no such entry") || !strings.Contains(out, "0 of 2 replayed") {
		t.Fatalf("queue replay of a done entry: exit %d\n%s", code, out)
	}
	code, out, errs := e.cli(t, "queue", "replay", "--status", "failed")
	if code != 1 || !strings.Contains(out, "no failed entries") {
		t.Fatalf("queue replay --status failed: exit %d\n%s%s", code, out, errs)
	}
	// deliveries replay under the same identity is refused like intake...
	code, out, _ = e.cli(t, "deliveries", "replay", delivery)
	if code != 1 || !strings.Contains(out, "TriggerReplayRejected") || !strings.Contains(out, "--new-event-id") {
		t.Fatalf("deliveries replay: exit %d\n%s", code, out)
	}
	// ...and with a fresh identity it is a new entry that runs for real.
	var rep struct {
		QueueID string `json:"queue_id"`
		Status  string `json:"status"`
		EventID string `json:"event_id"`
	}
	e.cliJSON(t, &rep, "deliveries", "replay", delivery, "--new-event-id")
	if rep.Status != "enqueued" || rep.QueueID == q || !strings.HasPrefix(rep.EventID, "replay-") {
		t.Fatalf("deliveries replay --new-event-id: %+v", rep)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, rep.QueueID) == "done" }, "the new entry to finish")
	charges := e.handlerCalls(t, "tool:ops/Charge")
	if len(charges) != 2 || charges[1].EffectID != rep.QueueID+":charge" {
		t.Fatalf("charge calls: %+v, want a second one for %s", charges, rep.QueueID)
	}

	// A compensation: a distinct effect, called with the original input.
	var comp struct {
		CompensationID string `json:"compensation_id"`
		State          string `json:"state"`
	}
	e.cliJSON(t, &comp, "effects", "compensate", q, q+":charge")
	if comp.State != "applied" || comp.CompensationID != q+":charge:compensate" {
		t.Fatalf("compensate: %+v", comp)
	}
	charges = e.handlerCalls(t, "tool:ops/Charge")
	last := charges[len(charges)-1]
	if last.Operation != "compensate" || last.EffectID != comp.CompensationID || string(last.Input) != string(charges[0].Input) {
		t.Fatalf("compensation call %+v, original input %s", last, charges[0].Input)
	}
	var effs []opEffect
	e.cliJSON(t, &effs, "effects", "ls", "--scope", q)
	states := map[string]string{}
	for _, x := range effs {
		states[x.EffectID] = x.State + "/" + x.Operation
	}
	if states[q+":charge"] != "applied/invoke" || states[q+":charge:compensate"] != "applied/compensate" {
		t.Fatalf("effects of %s: %v", q, states)
	}
	// A binding without compensation support is refused.
	code, _, errs = e.cli(t, "effects", "compensate", q, q+":notify")
	if code != 1 || !strings.Contains(errs, "CompensationNotSupported") {
		t.Fatalf("compensate notify: exit %d %s", code, errs)
	}
	// Tables print too.
	for _, args := range [][]string{{"queue", "ls"}, {"queue", "show", q}, {"deliveries", "show", delivery},
		{"deliveries", "ls"}, {"effects", "ls"}} {
		if code, out, errs := e.cli(t, args...); code != 0 || !strings.Contains(out, q) {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
	}
}

// TestCLIOnFilesTakesTheLock: without a daemon on the socket the CLI opens
// the files under the journal lock; a daemon that holds it means exit 3.
func TestCLIOnFilesTakesTheLock(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	// No files yet: the CLI creates nothing and says what it looked for.
	code, _, errs := e.cli(t, "queue", "ls")
	if code != 1 || !strings.Contains(errs, "no daemon answers") {
		t.Fatalf("queue ls without files: exit %d %s", code, errs)
	}
	if _, err := os.Stat(e.queue); !os.IsNotExist(err) {
		t.Fatalf("the CLI created %s", e.queue)
	}

	d := e.start(t)
	status, q := testkit.Post(t, d.URL()+"/triggers/ops/Orders", "order-1", `{"order_id": 1}`)
	if status != 202 {
		t.Fatalf("post: %d", status)
	}
	// A CLI that misses the socket must not open the files under the
	// daemon to change them (a read-only command reads them read-only:
	// TestReadOnlyCommandsNeedNoLock).
	other := *e
	other.socket = filepath.Join(e.dir, "elsewhere.sock")
	code, _, errs = other.cli(t, "queue", "replay", q)
	if code != 3 || !strings.Contains(errs, "JournalLocked") && !strings.Contains(errs, "held by") {
		t.Fatalf("queue replay beside a running daemon: exit %d %s", code, errs)
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("daemon stop: %v", err)
	}
	if _, err := os.Stat(e.socket); !os.IsNotExist(err) {
		t.Fatalf("the daemon left its admin socket: %v", err)
	}
	var list []opEntry
	e.cliJSON(t, &list, "queue", "ls")
	if len(list) != 1 || list[0].QueueID != q {
		t.Fatalf("queue ls on files: %+v", list)
	}
	code, out, errs := e.cli(t, "journal", "unlock")
	if code != 0 || !strings.Contains(out, "no lock record") {
		t.Fatalf("journal unlock with no lock: exit %d %s%s", code, out, errs)
	}
	// Usage errors exit 2.
	for _, args := range [][]string{{"queue"}, {"queue", "dance"}, {"queue", "show"},
		{"effects", "resolve", q, q + ":charge"}, {"effects", "resolve", q, q + ":charge", "--applied"},
		{"effects", "resolve", q, q + ":charge", "--not-applied", "--receipt-ref", "x"}} {
		if code, _, errs := e.cli(t, args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, errs)
		}
	}
	// A --json listing is JSON even when empty.
	var effs []opEffect
	code, out, _ = e.cli(t, "effects", "ls", "--scope", "no-such-entry", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &effs) != nil || len(effs) != 0 {
		t.Fatalf("empty effects ls --json: exit %d %q", code, out)
	}
}

// TestRetentionPurgesDoneBodies runs the daemon with a short --retention:
// the done entry loses its body and keeps its identity, so a redelivery is
// still refused as a replay.
func TestRetentionPurgesDoneBodies(t *testing.T) {
	e := newOpEnv(t, stubProgram, stubManifest)
	d := e.start(t, func(c *server.Config) { c.Retention = time.Second })
	url := d.URL() + "/triggers/ops/Bills"
	status, q := testkit.Post(t, url, "bill-1", `{"n":1}`)
	if status != 202 {
		t.Fatalf("post: %d", status)
	}
	var shown struct {
		Status     string `json:"status"`
		BodyPurged bool   `json:"body_purged"`
		Body       *struct {
			Text string `json:"text"`
		} `json:"body"`
	}
	testkit.WaitFor(t, opWait, func() bool {
		shown.Body = nil
		e.cliJSON(t, &shown, "queue", "show", q)
		return shown.BodyPurged
	}, "the body to be purged")
	if shown.Status != "done" || shown.Body != nil {
		t.Fatalf("entry after retention: %+v", shown)
	}
	if status, got := testkit.Post(t, url, "bill-1", `{"n":1}`); status != 200 || got != q {
		t.Fatalf("redelivery after retention: %d %s, want 200 consumed naming %s", status, got, q)
	}
	d.WaitLog("purged bodies of done entries", opWait)
}
