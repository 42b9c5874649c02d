package server

import (
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/trigger"
)

// tester tries the triggers of one program on stored deliveries (SPEC
// §2.4 `triggers test`): intake's decisions (trigger.Trigger.Try), then
// the steps' when and input (dispatcher.TrySteps). It enqueues nothing
// and calls no tool.
type tester struct{ p *trigger.Program }

// newTester is admin.Service.Tester: the running program (current's),
// or the candidate program's text, loaded under costLimit as a reload
// would load it.
func newTester(current func() *dispatcher.Config, costLimit uint64) func(program []byte, path string) (admin.Tester, error) {
	return func(program []byte, path string) (admin.Tester, error) {
		if program == nil {
			c := current()
			if c == nil {
				return nil, touba.Errorf(touba.EBadRequest, "no program is loaded (no daemon runs): give the program to try with --program FILE")
			}
			return tester{c.Program}, nil
		}
		if path == "" {
			path = "candidate program"
		}
		p, err := trigger.ParseProgramWith(path, program, trigger.LoadOptions{ExpressionCostLimit: costLimit})
		if err != nil {
			return nil, err
		}
		return tester{p}, nil
	}
}

func (t tester) lookup(ref string) (*trigger.Trigger, error) {
	tr, ok := t.p.Lookup(strings.TrimPrefix(ref, "trigger:"))
	if !ok {
		return nil, touba.Errorf(touba.ENotFound, "the program %s has no trigger %s", t.p.Path, ref)
	}
	return tr, nil
}

// Source implements admin.Tester.
func (t tester) Source(ref string) (string, bool, error) {
	tr, err := t.lookup(ref)
	if err != nil {
		return "", false, err
	}
	return tr.SourceTrigger().Ref, tr.IsRoute(), nil
}

// Try implements admin.Tester.
func (t tester) Try(ref string, d *touba.Delivery) touba.TriedDelivery {
	tr, err := t.lookup(ref)
	if err != nil {
		return touba.TriedDelivery{EventID: d.EventID, Code: touba.ENotFound, Message: err.Error()}
	}
	out := tr.Try(d)
	if out.Taken && out.Code == "" {
		run := *d
		run.TriggerRef = tr.Ref
		out.Steps = dispatcher.TrySteps(tr, &run)
	}
	return out
}
