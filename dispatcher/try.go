package dispatcher

import (
	"bytes"
	"encoding/json"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// TrySteps is what a run of t would compute for entry e before calling
// anything (SPEC §2.4 `triggers test`): each step's when and, for a tool
// step, its input as the dispatcher computes it, or a wait_for's match.
// No tool is called, so no tool step has an output: a step whose when or
// input reads one says so (NeedsOutput). A step whose when is false is
// skipped, its output null, as in a run. e is not stored; its gathering
// is itself alone.
func TrySteps(t *trigger.Trigger, e *touba.Delivery) []touba.TriedStep {
	cfg := &Config{} // its template cache only
	rc := newRunContext(e, nil)
	out := make([]touba.TriedStep, 0, len(t.Steps))
	unknown := map[string]bool{} // tool steps: their output is not known
	for _, st := range t.Steps {
		ts := touba.TriedStep{ID: st.ID, Kind: st.Kind()}
		needs := readsOutputOf(st, unknown)
		if st.When != nil {
			ok, err := rc.when(st.When)
			if err != nil {
				ts.Error, ts.NeedsOutput = touba.ErrorMessage(err), needs
				out = append(out, ts)
				unknown[st.ID] = true
				continue
			}
			ts.When = &ok
			if !ok {
				ts.Skipped = true
				_ = rc.setOutput(st.ID, json.RawMessage("null"))
				out = append(out, ts)
				continue
			}
		}
		switch {
		case st.WaitFor != nil:
			v, err := matchOf(cfg, rc, st.WaitFor)
			if err != nil {
				ts.Error, ts.NeedsOutput = touba.ErrorMessage(err), needs
			}
			ts.Match = v
		case st.Tool != "":
			in, err := rc.resolve(cfg, st.Input, st.Inputs)
			if err != nil {
				ts.Error, ts.NeedsOutput = touba.ErrorMessage(err), needs
			}
			ts.Input = in
		}
		// A sleep's output (when it woke) and a wait's (the delivery) are
		// not known either.
		unknown[st.ID] = true
		out = append(out, ts)
	}
	return out
}

// readsOutputOf tells whether st's when or input names the output of one
// of the steps in unknown ("/steps/<id>" in a $ref, steps.<id> in an
// expression).
func readsOutputOf(st trigger.Step, unknown map[string]bool) bool {
	var text bytes.Buffer
	text.Write(st.Input)
	if st.When != nil {
		text.WriteString(" " + st.When.Source)
	}
	if w := st.WaitFor; w != nil {
		text.Write(w.Match)
	}
	s := text.String()
	for id := range unknown {
		if strings.Contains(s, "/steps/"+id) || strings.Contains(s, "steps."+id) || strings.Contains(s, "steps['"+id) ||
			strings.Contains(s, `steps[\"`+id) {
			return true
		}
	}
	return false
}
