package durable_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// TestResumeFromThirdStep: flow (d). The shipping system is down: the
// order's third step fails (retries spent). The operator fixes it and
// resumes from ship: the first two writes are not repeated and ship and
// notify happen once. Resumed again from ship, nothing is written (the
// applied effects are read back); with --new-effects (and --yes, the CLI
// asks off a terminal) ship and notify are written again under new
// identities, and only they.
func TestResumeFromThirdStep(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	down := filepath.Join(w.dir, ".touba", "shipping-down")
	if err := os.MkdirAll(filepath.Dir(down), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(down, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w.start()
	body := `{"order_id": "ord-7", "amount": 4200, "lines": [{"sku": "tea", "qty": 2}]}`
	qid := w.post(refOrder, "order-7", body)
	e := w.waitStatus(qid, touba.StatusFailed)
	if e.ErrorCode != "ShippingUnavailable" {
		t.Fatalf("the order failed with %s (%s), want ShippingUnavailable", e.ErrorCode, e.ErrorMessage)
	}
	w.once("reserve", qid)
	w.once("charge", qid)
	w.never("ship", qid)
	w.never("notify", qid)

	// Refused: a step the trigger does not have.
	if _, stderr, err := w.cli("queue", "resume", qid, "--from", "pack", "--reason", "typo"); err == nil || !strings.Contains(stderr, touba.EEntryNotResumable) {
		t.Fatalf("resume from an unknown step: err %v, stderr %q, want EntryNotResumable", err, stderr)
	}

	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	var res admin.ResumeReport
	w.cliJSON(&res, "queue", "resume", qid, "--from", "ship", "--reason", "shipping fixed (INC-7)")
	if res.QueueID != qid || res.From != "ship" || !slices.Equal(res.Steps, []string{"ship", "notify"}) || res.Left != touba.StatusFailed {
		t.Fatalf("resume answered %+v, want %s from ship (ship, notify), left failed", res, qid)
	}
	e = w.waitStatus(qid, touba.StatusDone)
	w.once("reserve", qid)
	w.once("charge", qid)
	if c := w.once("ship", qid); c.EffectID != touba.EffectIDFor(qid, "ship", 0) {
		t.Fatalf("ship after the resume: effect %s, want %s", c.EffectID, touba.EffectIDFor(qid, "ship", 0))
	}
	w.once("notify", qid)
	reasons := 0
	for _, ev := range e.Operator {
		if ev.Reason == "shipping fixed (INC-7)" {
			reasons++
		}
	}
	if reasons == 0 {
		t.Fatalf("the audit trail does not record the resume's reason: %+v", e.Operator)
	}

	// Again from ship, same effects: read back from the journal, no call.
	runs := len(e.Runs)
	w.cliJSON(nil, "queue", "resume", qid, "--from", "ship", "--reason", "re-check")
	e = w.waitShow(qid, "the second resume's run to end done", func(e shown) bool {
		return e.Status == touba.StatusDone && len(e.Runs) > runs
	})
	for _, tool := range []string{"reserve", "charge", "ship", "notify"} {
		w.once(tool, qid)
	}

	// --new-effects off a terminal without --yes: refused, nothing done.
	runs = len(e.Runs)
	if _, stderr, err := w.cli("queue", "resume", qid, "--from", "ship", "--new-effects", "--reason", "resend"); err == nil {
		t.Fatalf("resume --new-effects without --yes off a terminal was accepted: %s", stderr)
	}
	if e := w.show(qid); e.Status != touba.StatusDone || len(e.Runs) != runs {
		t.Fatalf("after a refused resume: %s with %d runs, want done with %d", e.Status, len(e.Runs), runs)
	}

	res = admin.ResumeReport{}
	w.cliJSON(&res, "queue", "resume", qid, "--from", "ship", "--new-effects", "--yes", "--reason", "the carrier lost the parcel")
	if res.EffectIDs["ship"] != touba.EffectIDFor(qid, "ship", 1) || res.EffectIDs["notify"] != touba.EffectIDFor(qid, "notify", 1) {
		t.Fatalf("resume --new-effects: effect ids %v, want %s and %s", res.EffectIDs, touba.EffectIDFor(qid, "ship", 1), touba.EffectIDFor(qid, "notify", 1))
	}
	w.waitShow(qid, "the run with new effects to end done", func(e shown) bool {
		return e.Status == touba.StatusDone && len(e.Runs) > runs
	})
	w.once("reserve", qid)
	w.once("charge", qid)
	for _, step := range []string{"ship", "notify"} {
		cs := w.callsOf(step, qid)
		if len(cs) != 2 || cs[0].EffectID != touba.EffectIDFor(qid, step, 0) || cs[1].EffectID != touba.EffectIDFor(qid, step, 1) || cs[1].Repeat {
			t.Fatalf("%s after --new-effects: %+v, want a second write under %s", step, cs, touba.EffectIDFor(qid, step, 1))
		}
	}
	var effects []touba.Effect
	w.cliJSON(&effects, "effects", "ls", "--scope", qid)
	applied := map[string]bool{}
	for _, ef := range effects {
		applied[ef.EffectID] = ef.State == touba.EffectApplied
	}
	for _, id := range []string{touba.EffectIDFor(qid, "ship", 1), touba.EffectIDFor(qid, "notify", 1)} {
		if !applied[id] {
			t.Fatalf("effects ls --scope %s: %s is not applied: %+v", qid, id, effects)
		}
	}
}
