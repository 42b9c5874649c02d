package dispatcher_test

import (
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// Version pinning across a reload: an entry of trigger:t/order completed
// step "first" and waits at "paid" when the program changes. Once paid, it
// goes on under the new program only when "first" is still there with the
// same tool; otherwise it is parked ProgramChanged, naming the step.
func TestVersionPinning(t *testing.T) {
	pinned := func(t *testing.T, cf string, first, last map[string]any) string {
		return programOf(t,
			trig(orderTrig, nil, first, waitStep("paid", payTrig, "order", 0, ""), last),
			trig(payTrig, nil, toolStep("ack", toolThen, okInput("", nil))),
		)
	}
	for _, c := range []struct {
		name        string
		first, last func(cf string) map[string]any // of the new program
		status      string
	}{
		{"unchanged completed steps", func(cf string) map[string]any { return toolStep("first", toolThen, okInput(cf, 1)) },
			func(cf string) map[string]any { return toolStep("last", toolW, okInput(cf, "new")) }, touba.StatusDone},
		{"completed step's tool changed", func(cf string) map[string]any { return toolStep("first", toolW, okInput(cf, 1)) },
			func(cf string) map[string]any { return toolStep("last", toolThen, okInput(cf, nil)) }, touba.StatusParked},
		{"completed step gone", func(cf string) map[string]any { return toolStep("first2", toolThen, okInput(cf, 1)) },
			func(cf string) map[string]any { return toolStep("last", toolW, okInput(cf, nil)) }, touba.StatusParked},
		{"completed step now a sleep", func(cf string) map[string]any { return sleepStep("first", map[string]any{"ms": 1}) },
			func(cf string) map[string]any { return toolStep("last", toolW, okInput(cf, nil)) }, touba.StatusParked},
	} {
		t.Run(c.name, func(t *testing.T) {
			cf := tmp(t, "calls")
			w := newWorld(t, pinned(t, cf, toolStep("first", toolThen, okInput(cf, 1)), toolStep("last", toolW, okInput(cf, "old"))),
				processManifest(t, []string{toolThen, toolW}), nil, true)
			w.mustWaits()
			qid := w.post(orderTrig, `{"order": "o-1"}`)
			w.wait(qid, touba.StatusWaiting)
			if e := w.entry(qid); e.ProgramDigest == "" {
				t.Fatalf("entry %s has no program digest", qid)
			}
			w.reload(pinned(t, cf, c.first(cf), c.last(cf)))
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
