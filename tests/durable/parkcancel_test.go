package durable_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/testkit"
)

const refOrderCancelled = "trigger:examples.durable/OrderCancelled"

// TestCancelSurvivesThePark (SPEC §2.3 reloads, issue 33 defect 1): an
// order's charge hangs and ends unknown (retry_mode reconcile: the entry
// parks); the customer cancelled the order while the charge was in
// flight. However the operator settles the park (effects resolve, queue
// replay, queue resume) the order ends cancelled and its ship step never
// runs; `queue replay` of the cancelled entry, or --ignore-cancel, runs it
// on.
func TestCancelSurvivesThePark(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(p program) {
		p.trigger(refOrder)["cancel_on"] = []any{map[string]any{"trigger": refOrderCancelled,
			"match": map[string]any{"$ref": "/event/body/order_id"}, "on": "/body/order_id"}}
		p["triggers"] = append(p["triggers"].([]any), map[string]any{"ref": refOrderCancelled,
			"source": map[string]any{"kind": "webhook", "event_id": map[string]any{"header": "x-touba-event-id"}}, "steps": []any{}})
	})
	var man map[string]any
	b, err := os.ReadFile(w.manifest)
	if err == nil {
		err = json.Unmarshal(b, &man)
	}
	if err != nil {
		t.Fatal(err)
	}
	charge := man["bindings"].(map[string]any)["tool:examples.durable/ChargeCard"].(map[string]any)
	charge["effect_contract"].(map[string]any)["retry_mode"] = "reconcile"
	if b, err = json.Marshal(man); err != nil || os.WriteFile(w.manifest, b, 0o600) != nil {
		t.Fatal("write manifest", err)
	}
	flags := filepath.Join(w.dir, ".touba")
	if err := os.MkdirAll(flags, 0o700); err != nil {
		t.Fatal(err)
	}
	w.start()

	// parked posts order id, cancels it while its charge hangs, and
	// waits for the charge's unknown outcome to park it.
	parked := func(id string) string {
		t.Helper()
		os.Remove(filepath.Join(flags, "charge-started"))
		if err := os.WriteFile(filepath.Join(flags, "charge-stuck"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		qid := w.post(refOrder, "order-"+id, `{"order_id": "`+id+`", "amount": 100, "lines": []}`)
		testkit.WaitFor(t, waitLong, func() bool {
			_, err := os.Stat(filepath.Join(flags, "charge-started"))
			return err == nil
		}, "the charge of "+id+" to be in flight")
		w.post(refOrderCancelled, "cancel-"+id, `{"order_id": "`+id+`"}`)
		if e := w.show(qid); e.Status != touba.StatusRunning {
			t.Fatalf("order %s is %s while its charge is in flight, want running", id, e.Status)
		}
		if err := os.Remove(filepath.Join(flags, "charge-stuck")); err != nil {
			t.Fatal(err)
		}
		if e := w.waitStatus(qid, touba.StatusParked); e.ErrorCode != touba.EEffectReconciliationRequired {
			t.Fatalf("order %s parked with %s, want %s", id, e.ErrorCode, touba.EEffectReconciliationRequired)
		}
		return qid
	}
	cancelled := func(qid string) {
		t.Helper()
		e := w.waitStatus(qid, touba.StatusCancelled)
		if e.ErrorCode != touba.ERunCancelled {
			t.Fatalf("order %s cancelled with %s, want %s", qid, e.ErrorCode, touba.ERunCancelled)
		}
		w.never("ship", qid)
		w.never("notify", qid)
	}

	t.Run("Resolve", func(t *testing.T) {
		qid := parked("r1")
		var res admin.ResolveResult
		w.cliJSON(&res, "effects", "resolve", qid, touba.EffectIDFor(qid, "charge", 0), "--applied", "--receipt-ref", "card-net:r1")
		if res.EntryStatus != touba.StatusCancelled {
			t.Fatalf("resolve left the entry %s (%s), want cancelled", res.EntryStatus, res.Note)
		}
		cancelled(qid)
		// The operator runs it on anyway: a replay of the cancelled entry;
		// the charge is read back as resolved, not called.
		w.cliJSON(nil, "queue", "replay", qid)
		w.waitStatus(qid, touba.StatusDone)
		w.never("charge", qid)
		w.once("ship", qid)
	})
	t.Run("Replay", func(t *testing.T) {
		qid := parked("r2")
		var rep admin.ReplayReport
		w.cliJSON(&rep, "queue", "replay", qid)
		if len(rep.Items) != 1 || rep.Items[0].Status != touba.StatusCancelled {
			t.Fatalf("replay answered %+v, want the entry cancelled", rep.Items)
		}
		cancelled(qid)
		w.never("charge", qid)
	})
	t.Run("Resume", func(t *testing.T) {
		qid := parked("r3")
		var rep admin.ResumeReport
		w.cliJSON(&rep, "queue", "resume", qid, "--from", "charge")
		if rep.Status != touba.StatusCancelled {
			t.Fatalf("resume answered %+v, want the entry cancelled", rep)
		}
		cancelled(qid)
		w.never("charge", qid)
	})
	t.Run("ResumeIgnoringCancel", func(t *testing.T) {
		qid := parked("r4")
		var rep admin.ResumeReport
		w.cliJSON(&rep, "queue", "resume", qid, "--from", "charge", "--new-effects", "--yes", "--ignore-cancel")
		if rep.Status != touba.StatusPending {
			t.Fatalf("resume --ignore-cancel answered %+v, want pending", rep)
		}
		w.waitStatus(qid, touba.StatusDone)
		w.once("charge", qid)
		w.once("ship", qid)
	})
}
