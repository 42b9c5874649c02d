package manifest

import (
	"strconv"

	"github.com/touba/touba-trigger/internal/strictjson"
)

// Circuit is a binding's circuit breaker (SPEC §2.2 circuit): once at
// least MinCalls calls ended within WindowMS and at least FailureRatio of
// them failed, runs needing the binding wait OpenMS, then one call probes.
type Circuit struct {
	FailureRatio float64 `json:"failure_ratio"`
	MinCalls     int     `json:"min_calls"`
	WindowMS     int     `json:"window_ms"`
	OpenMS       int     `json:"open_ms"`
}

// The bounds of a circuit's fields.
const (
	maxCircuitCalls = 1_000_000
	maxCircuitMS    = maxMS // a day
)

// circuit checks a binding's circuit: every field required, no other,
// failure_ratio a number in (0, 1], the others positive integers.
func (p *problems) circuit(path string, n *strictjson.Node) *Circuit {
	f, _ := p.Object(path, n, []string{"failure_ratio", "min_calls", "window_ms", "open_ms"},
		"failure_ratio", "min_calls", "window_ms", "open_ms")
	if f == nil {
		return nil
	}
	c := &Circuit{}
	ok := true
	if r, has := f["failure_ratio"]; has {
		at := strictjson.Child(path, "failure_ratio")
		if r.Kind != strictjson.Number {
			p.Fail(at, "must be a number in (0, 1] (got %s)", r.Kind)
			ok = false
		} else if v, err := strconv.ParseFloat(r.Text, 64); err != nil || !(v > 0 && v <= 1) {
			p.Fail(at, "must be a number in (0, 1] (got %s)", r.Text)
			ok = false
		} else {
			c.FailureRatio = v
		}
	}
	for _, x := range []struct {
		name string
		max  int64
		dst  *int
	}{{"min_calls", maxCircuitCalls, &c.MinCalls}, {"window_ms", maxCircuitMS, &c.WindowMS}, {"open_ms", maxCircuitMS, &c.OpenMS}} {
		if v, has := f[x.name]; has {
			i, err := p.Integer(strictjson.Child(path, x.name), v, x.max)
			ok = ok && err == nil
			*x.dst = int(i)
		}
	}
	if !ok || len(f) < 4 {
		return nil
	}
	return c
}
