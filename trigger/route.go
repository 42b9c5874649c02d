package trigger

import (
	"strconv"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// Routes (SPEC §2.4): a trigger whose source is {"kind": "trigger",
// "trigger": REF} takes its deliveries from the accepting trigger REF (a
// webhook or a schedule of the same program) instead of from HTTP. This
// file loads them and links each to its accepting trigger; routing.go
// decides, per delivery, which routes take it.

// KindRoute is the source kind of a route.
const KindRoute = "trigger"

// routeFields are what a route's source takes.
var routeFields = map[string]bool{"kind": true, "trigger": true}

// IsRoute reports whether t is a route (no HTTP route of its own: its
// deliveries are its accepting trigger's).
func (t *Trigger) IsRoute() bool { return t.Source.Kind == KindRoute }

// Accepting is the trigger a route takes its deliveries from; nil for a
// trigger that is not a route.
func (t *Trigger) Accepting() *Trigger { return t.accepting }

// sourceKind peeks at a source's kind before it is checked ("" when it
// has none a string).
func sourceKind(n *strictjson.Node) string {
	if n == nil || n.Kind != strictjson.Object {
		return ""
	}
	for i, k := range n.Keys {
		if k == "kind" && n.Vals[i].Kind == strictjson.String {
			return n.Vals[i].Text
		}
	}
	return ""
}

// route reads a route's source; m holds the source's known fields. A
// webhook-only field is refused by name, not ignored: the accepting
// trigger's verify, allow_from, rate_limit, event_id, max_body_bytes and
// redelivery apply, before any route sees a delivery.
func (w walker) route(path string, m strictjson.Fields, s *Source) error {
	for _, k := range append(append([]string{}, sourceFields...), "trigger") {
		if _, ok := m[k]; ok && !routeFields[k] {
			return w.Fail(path+"."+k, `a route (source kind "trigger") has no %s of its own: its accepting trigger's applies (known for a route: kind, trigger)`, k)
		}
	}
	raw, ok := m["trigger"]
	if !ok {
		return w.Fail(path+".trigger", "required field is missing: the ref of the accepting trigger")
	}
	ref, err := w.Str(path+".trigger", raw)
	if err != nil {
		return err
	}
	if !refPattern.MatchString(canonicalRef(ref)) {
		return w.Fail(path+".trigger", `must be a trigger ref ("trigger:" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*)`)
	}
	s.From = canonicalRef(ref)
	// The accepting trigger's body bound is the route's: its expressions'
	// cost estimates must assume the bodies it lets in.
	if n, ok := w.exprs.bodies[s.From]; ok {
		s.MaxBodyBytes = n
	}
	return nil
}

// linkRoutes links each route to its accepting trigger, now that every
// trigger is known: it must be a webhook or schedule trigger of the
// program, and not the route itself. The accepting trigger lists its
// routes in the program's order.
func (w walker) linkRoutes(p *Program) error {
	for i, t := range p.Triggers {
		if !t.IsRoute() {
			continue
		}
		path := strictjson.Index("$.triggers", i) + ".source.trigger"
		a, err := w.named(p, path, t, t.Source.From, "a route cannot take its deliveries from itself")
		if err != nil {
			return err
		}
		if a.IsRoute() {
			return w.Fail(path, "%s is itself a route (of %s): no route of a route; name the accepting trigger %s",
				a.Ref, a.Source.From, a.Source.From)
		}
		t.accepting = a
		t.Source.MaxBodyBytes, t.Source.Redelivery = a.Source.MaxBodyBytes, a.Source.Redelivery
		a.Routes = append(a.Routes, t)
	}
	return nil
}

// prescanBodies reads each trigger's max_body_bytes before the triggers
// are loaded, by ref, so that a route's expressions are estimated under
// its accepting trigger's bound wherever that trigger stands in the file.
// What it cannot read it leaves out: the load itself refuses it.
func prescanBodies(list []*strictjson.Node) map[string]int64 {
	out := map[string]int64{}
	for _, t := range list {
		if t == nil || t.Kind != strictjson.Object {
			continue
		}
		var ref string
		var src *strictjson.Node
		for i, k := range t.Keys {
			switch k {
			case "ref":
				ref = t.Vals[i].Text
			case "source":
				src = t.Vals[i]
			}
		}
		n := int64(DefaultMaxBodyBytes)
		if src != nil && src.Kind == strictjson.Object {
			for i, k := range src.Keys {
				if k == "max_body_bytes" && src.Vals[i].Kind == strictjson.Number {
					if v, err := strconv.ParseInt(src.Vals[i].Text, 10, 64); err == nil && v > 0 && v <= maxBodyBytesUpperBound {
						n = v
					}
				}
			}
		}
		if ref != "" {
			out[canonicalRef(ref)] = n
		}
	}
	return out
}

// notARoute is intake's answer to a POST naming a route (SPEC §2.4: a
// route has no URL).
func notARoute(t *Trigger) *touba.Error {
	return touba.Errorf(touba.ETriggerNotFound, "%s is a route: it has no URL (its deliveries are those its accepting trigger accepts)", t.Ref)
}
