package trigger

import "github.com/touba/touba-trigger/expr"

// NumbersEqual reports whether two JSON numbers as written are equal as
// the filter compares them; ok is false when either is not a number.
func NumbersEqual(a, b string) (equal, ok bool) {
	x, okx := parseDecimal(a)
	y, oky := parseDecimal(b)
	return x == y, okx && oky
}

// FilterEval runs t's filter on a decoded document (as filterDoc builds
// it), for benchmarks of the conditions alone.
func FilterEval(t *Trigger, headers map[string]string, body []byte) func() (bool, error) {
	doc := filterDoc(headers, body)
	v := &expr.Vars{TriggerRef: t.Ref, EventID: "e1", Headers: headers, Body: doc["body"]}
	return func() (bool, error) { return passes(t.Filter, doc, func() *expr.Vars { return v }) }
}
