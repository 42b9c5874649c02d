package trigger

import (
	//PRUNED
	//PRUNED
	//PRUNED
	//PRUNED
	//PRUNED
	"strings"

	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/internal/jsonptr"
	//PRUNED
	"github.com/touba/touba-trigger/internal/strictjson"
	// PRUNED
)

// LoadProgram reads and strictly checks a program file, its expressions
// under the default cost limit (LoadProgramWith for another).
func LoadProgram(path string) (*Program, error) {
	return LoadProgramWith(path, LoadOptions{})
}

// ParseProgram checks a program document; path is used in messages.
func ParseProgram(path string, data []byte) (*Program, error) {
	return ParseProgramWith(path, data, LoadOptions{})
}

func (w walker) program(path string, data []byte) (*Program, error) {
	root := w.Decode(data)
	if root == nil {
		return nil, w.Err()
	}
	top, err := w.Object("$", root, []string{"air_version", "triggers"}, "air_version", "triggers")
	if err != nil {
		return nil, err
	}
	v, err := w.Str("$.air_version", top["air_version"])
	if err != nil {
		return nil, err
	}
	if v != AIRVersion {
		return nil, w.Fail("$.air_version", "must be %q", AIRVersion)
	}
	list, err := w.Array("$.triggers", top["triggers"])
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, w.Fail("$.triggers", "must hold at least one trigger")
	}
	w.exprs.bodies = prescanBodies(list)
	p := &Program{Path: path, byName: map[string]*Trigger{}}
	for i, r := range list {
		t, err := w.trigger(strictjson.Index("$.triggers", i), r)
		if err != nil {
			return nil, err
		}
		if _, dup := p.byName[t.Name]; dup {
			return nil, w.Fail(strictjson.Index("$.triggers", i)+".ref", "duplicate trigger ref %q", t.Ref)
		}
		p.byName[t.Name] = t
		p.Triggers = append(p.Triggers, t)
	}
	if err := w.linkRoutes(p); err != nil {
		return nil, err
	}
	if err := w.index(p); err != nil {
		return nil, err
	}
	return p, nil
}

func (w walker) trigger(path string, raw *strictjson.Node) (*Trigger, error) {
	m, err := w.Object(path, raw, []string{"ref", "source", "steps", "retry", "filter", "concurrency", "cancel_on", "dispatch",
		"debounce", "batch"}, "ref", "source", "steps")
	if err != nil {
		return nil, err
	}
	t := &Trigger{}
	if t.Ref, err = w.Str(path+".ref", m["ref"]); err != nil {
		return nil, err
	}
	if !refPattern.MatchString(t.Ref) {
		return nil, w.Fail(path+".ref", `must be "trigger:" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*`)
	}
	t.Name = strings.TrimPrefix(t.Ref, "trigger:")
	if t.Source, err = w.source(path+".source", m["source"]); err != nil {
		return nil, err
	}
	if t.Steps, err = w.steps(path+".steps", m["steps"], t.bounds()); err != nil {
		return nil, err
	}
	t.Retry = Retry{MaxAttempts: DefaultMaxAttempts, InitialIntervalMS: DefaultInitialMS, MaxIntervalMS: DefaultMaxIntervalMS}
	if r, ok := m["retry"]; ok {
		if t.Retry, err = w.retry(path+".retry", r); err != nil {
			return nil, err
		}
	}
	if err := w.flow(path, m, t); err != nil {
		return nil, err
	}
	if t.IsSchedule() && t.Filter != nil {
		return nil, w.Fail(path+".filter", "a schedule trigger takes no filter: every tick is enqueued")
	}
	if err := w.gather(path, m, t); err != nil {
		return nil, err
	}
	if v, ok := m["cancel_on"]; ok {
		if t.CancelOn, err = w.cancelOn(path+".cancel_on", v, t.bounds()); err != nil {
			return nil, err
		}
	}
	t.Weight = DefaultWeight
	if v, ok := m["dispatch"]; ok {
		if t.Weight, err = w.dispatch(path+".dispatch", v); err != nil {
			return nil, err
		}
	}
	if err := w.definition(path, raw, t); err != nil {
		return nil, err
	}
	return t, nil
}

func (w walker) retry(path string, raw *strictjson.Node) (Retry, error) {
	r := Retry{MaxAttempts: DefaultMaxAttempts, InitialIntervalMS: DefaultInitialMS, MaxIntervalMS: DefaultMaxIntervalMS}
	m, err := w.Object(path, raw, []string{"max_attempts", "initial_interval_ms", "max_interval_ms"})
	if err != nil {
		return r, err
	}
	if v, ok := m["max_attempts"]; ok {
		n, err := w.Integer(path+".max_attempts", v, 1000)
		if err != nil {
			return r, err
		}
		r.MaxAttempts = int(n)
	}
	if v, ok := m["initial_interval_ms"]; ok {
		if r.InitialIntervalMS, err = w.Integer(path+".initial_interval_ms", v, 86_400_000); err != nil {
			return r, err
		}
	}
	if v, ok := m["max_interval_ms"]; ok {
		if r.MaxIntervalMS, err = w.Integer(path+".max_interval_ms", v, 86_400_000); err != nil {
			return r, err
		}
	}
	if r.MaxIntervalMS < r.InitialIntervalMS {
		return r, w.Fail(path+".max_interval_ms", "must not be below initial_interval_ms")
	}
	return r, nil
}

func (w walker) steps(path string, raw *strictjson.Node, b expr.Bounds) ([]Step, error) {
	list, err := w.Array(path, raw)
	if err != nil {
		return nil, err
	}
	// No steps is allowed: a trigger whose events are only awaited by
	// another's wait_for, or only cancel others' entries (SPEC §2.3).
	steps := make([]Step, 0, len(list))
	seen := map[string]bool{}
	for i, r := range list {
		s, err := w.step(strictjson.Index(path, i), r, seen, b)
		if err != nil {
			return nil, err
		}
		seen[s.ID] = true
		steps = append(steps, s)
	}
	return steps, nil
}

// refs checks every {"$ref": ...} in a step input: a valid pointer into
// /event or into the output of an earlier step; and compiles every
// {"$cel": EXPR} (SPEC §2.4), which may read the steps before.
//
// cels receives the compiled expressions by their text; nil where $cel
// may not stand (a wait_for's match: a key takes {"cel": EXPR}).
func (w walker) refs(path string, n *strictjson.Node, earlier map[string]bool, b expr.Bounds, cels map[string]*expr.Expr) error {
	switch n.Kind {
	case strictjson.Object:
		if len(n.Keys) == 1 && n.Keys[0] == "$ref" {
			return w.ref(strictjson.Child(path, "$ref"), n.Vals[0], earlier)
		}
		if isCEL(n, "$cel") && cels != nil {
			x, err := w.compile(strictjson.Child(path, "$cel"), n.Vals[0], expr.Step, expr.Value, b)
			if err == nil {
				cels[x.Source] = x
			}
			return err
		}
		for i, k := range n.Keys {
			if err := w.refs(strictjson.Child(path, k), n.Vals[i], earlier, b, cels); err != nil {
				return err
			}
		}
	case strictjson.Array:
		for i, item := range n.Items {
			if err := w.refs(strictjson.Index(path, i), item, earlier, b, cels); err != nil {
				return err
			}
		}
	}
	return nil
}

// ref checks the pointer of one {"$ref": ...}.
func (w walker) ref(path string, n *strictjson.Node, earlier map[string]bool) error {
	s, err := w.Str(path, n)
	if err != nil {
		return err
	}
	toks, err := jsonptr.Parse(s)
	if err != nil || len(toks) == 0 {
		return w.Fail(path, "must be a JSON pointer into /event, /events or /steps")
	}
	switch {
	case toks[0] == "event", toks[0] == "events":
	case toks[0] == "steps" && len(toks) >= 2 && earlier[toks[1]]:
	case toks[0] == "steps":
		return w.Fail(path, "must name an earlier step")
	default:
		return w.Fail(path, "must be a JSON pointer into /event, /events or /steps")
	}
	return nil
}
