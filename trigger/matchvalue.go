package trigger

import (
	"encoding/json"

	"github.com/touba/touba-trigger/handler"
)

// CanonicalValue renders one value a wait or a cancel matches on, as
// compact canonical JSON (handler.Canonical: keys sorted, no space,
// numbers as written, minimal string escapes). Intake renders with it
// what a delivery holds at a wait_for's or a cancel_on's `on`, and the
// dispatcher what a wait_for's `match` resolves to, so two values match
// exactly when their renderings are equal strings: "42" and 42 differ,
// {"a":1,"b":2} and {"b":2,"a":1} do not. Decode values with UseNumber
// (or pass a json.RawMessage): a float64 is rendered as encoding/json
// writes it, which may not be how the sender wrote the number.
//
// ok is false for nil (JSON null), which never matches: a delivery
// lacking the field must not meet every wait whose value is missing too;
// and for a value that is not JSON.
func CanonicalValue(v any) (string, bool) {
	if v == nil {
		return "", false
	}
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return "", false
		}
	}
	c, err := handler.Canonical(b)
	if err != nil || string(c) == "null" {
		return "", false
	}
	return string(c), true
}
