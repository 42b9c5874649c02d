package dispatcher_test

import (
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// Version pinning across a reload: an entry of trigger:t/order completed
// step "first" and waits at "paid" when the program changes. Once paid, it
// goes on under the new program only when "first" is still there with the
// same kind (tool); otherwise it is parked ProgramChanged, naming the step.
// "first" is completed by its checkpoint (toolThen, no effect contract) or
// by its applied effect (toolW, an external write: no checkpoint).
func TestVersionPinning(t *testing.T) {
	pinned := func(t *testing.T, first, last map[string]any) string {
		return programOf(t,
			trig(orderTrig, nil, first, waitStep("paid", payTrig, "order", 0, ""), last),
			trig(payTrig, nil, toolStep("ack", toolThen, okInput("", nil))),
		)
	}
	other := map[string]string{toolThen: toolW, toolW: toolThen}
	for _, c := range []struct {
		name   string
		tool   string                                             // first's tool in the entry's program
		next   func(cf, tool string) (first, last map[string]any) // the new program's
		status string
	}{
		{"unchanged completed steps", toolThen, func(cf, tool string) (map[string]any, map[string]any) {
			return toolStep("first", tool, okInput(cf, 1)), toolStep("last", other[tool], okInput(cf, "new"))
		}, touba.StatusDone},
		{"unchanged journaled step", toolW, func(cf, tool string) (map[string]any, map[string]any) {
			return toolStep("first", tool, okInput(cf, 1)), toolStep("last", other[tool], okInput(cf, "new"))
		}, touba.StatusDone},
		{"completed step's tool changed", toolThen, func(cf, tool string) (map[string]any, map[string]any) {
			return toolStep("first", other[tool], okInput(cf, 1)), toolStep("last", tool, okInput(cf, nil))
		}, touba.StatusParked},
		{"journaled step's tool changed", toolW, func(cf, tool string) (map[string]any, map[string]any) {
			return toolStep("first", other[tool], okInput(cf, 1)), toolStep("last", tool, okInput(cf, nil))
		}, touba.StatusParked},
		{"completed step gone", toolThen, func(cf, tool string) (map[string]any, map[string]any) {
			return toolStep("first2", tool, okInput(cf, 1)), toolStep("last", other[tool], okInput(cf, nil))
		}, touba.StatusParked},
		{"completed step now a sleep", toolThen, func(cf, tool string) (map[string]any, map[string]any) {
			return sleepStep("first", map[string]any{"ms": 1}), toolStep("last", other[tool], okInput(cf, nil))
		}, touba.StatusParked},
	} {
		t.Run(c.name, func(t *testing.T) {
			cf := tmp(t, "calls")
			w := newWorld(t, pinned(t, toolStep("first", c.tool, okInput(cf, 1)), toolStep("last", other[c.tool], okInput(cf, "old"))),
				processManifest(t, []string{toolThen, toolW}, toolW), nil, true)
			w.mustWaits()
			qid := w.post(orderTrig, `{"order": "o-1"}`)
			w.wait(qid, touba.StatusWaiting)
			if e := w.entry(qid); e.ProgramDigest == "" {
				t.Fatalf("entry %s has no program digest", qid)
			}
			if _, checkpointed := w.steps(qid)["first"]; checkpointed != (c.tool == toolThen) {
				t.Fatalf("first checkpointed %v, want %v", checkpointed, c.tool == toolThen)
			}
			first, last := c.next(cf, c.tool)
			w.reload(pinned(t, first, last))
			w.post(payTrig, `{"order": "o-1", "amount": 5}`)
			e := w.wait(qid, c.status)
			cs := calls(t, cf)
			if c.status == touba.StatusParked {
				rs := w.waitRuns(qid, 2)
				if e.ErrorCode != touba.EProgramChanged || !strings.Contains(rs[1].ErrorMessage, "step first,") {
					t.Fatalf("entry %s, run %+v; want parked %s naming step first", e.ErrorCode, rs[1], touba.EProgramChanged)
				}
				if len(cs) != 1 {
					t.Fatalf("calls %+v, want first's only", cs)
				}
				return
			}
			if len(cs) != 2 || string(field(t, cs[1].Input, "data")) != `"new"` {
				t.Fatalf("calls %+v, want first's, then last's under the new program", cs)
			}
		})
	}
}
