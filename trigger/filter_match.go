package trigger

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/internal/httpjson"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// filterDoc is the document a filter's pointers read:
// {"headers": {lower-case name: value}, "body": parsed JSON or the raw
// body as a string}.
func filterDoc(headers map[string]string, body []byte) map[string]any {
	h := make(map[string]any, len(headers))
	for k, v := range headers {
		h[k] = v
	}
	return map[string]any{"headers": h, "body": parsedBody(body)}
}

// parsedBody is the body as JSON with numbers kept as written, or as a
// string when it is not one JSON document (as /event/body in a run).
func parsedBody(b []byte) any {
	v, err := decodeValue(b)
	if err != nil {
		return string(b)
	}
	return v
}

// passes reports whether doc meets every condition, in order: a
// condition that does not hold ends it. vars gives a {"cel": EXPR}
// condition its variables, made on first use; an expression that fails is
// ExpressionFailed.
func passes(conds []Condition, doc map[string]any, vars func() *expr.Vars) (bool, error) {
	var v0 *expr.Vars
	for _, c := range conds {
		if c.CEL != nil {
			if v0 == nil {
				v0 = vars()
			}
			ok, err := c.CEL.Bool(v0)
			if err != nil {
				return false, touba.Errorf(touba.EExpressionFailed, "%v", err)
			}
			if !ok {
				return false, nil
			}
			continue
		}
		v, err := jsonptr.Get(doc, c.Pointer)
		found := err == nil
		if err != nil && !errors.Is(err, jsonptr.ErrNotFound) {
			return false, nil
		}
		switch {
		case c.Exists != nil:
			if found != *c.Exists {
				return false, nil
			}
		case !found:
			return false, nil
		case c.isEq:
			if !jsonEqual(v, c.eq) {
				return false, nil
			}
		default:
			// A number is read once, whatever the length of the list.
			if n, ok := v.(json.Number); ok {
				d, ok := parseDecimal(n.String())
				if !ok {
					return false, nil
				}
				v = d
			}
			hit := false
			for _, want := range c.in {
				if jsonEqual(v, want) {
					hit = true
					break
				}
			}
			if !hit {
				return false, nil
			}
		}
	}
	return true, nil
}

// jsonEqual compares a decoded JSON value of the delivery (numbers as
// json.Number, or already as decimals) with a compiled constant (numbers
// as decimals, see compileValue); numbers by value, so 1, 1.0 and 1e0 are
// equal. It takes time linear in the size of a.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(decimal)
		if !ok {
			return false
		}
		d, ok := parseDecimal(x.String())
		return ok && d == y
	case decimal:
		y, ok := b.(decimal)
		return ok && x == y
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	default: // string, bool, nil
		return a == b
	}
}

// filterOut answers a verified delivery that fails t's filter: 202
// filtered, a delivery-log row with code filtered and its body (so an
// operator can replay it on purpose), and no entry. It reports whether it
// answered.
//
// A filter expression that fails (SPEC §2.4) is answered the same 202
// filtered, so the sender does not retry it, with the code ExpressionFailed
// in the answer and the delivery log: an operator replays it once the
// program is fixed.
func (in *Intake) filterOut(w http.ResponseWriter, r *http.Request, req *request, t *Trigger) bool {
	if len(t.Filter) == 0 {
		return false
	}
	ok, doc, err := t.takes(req.eventID, req.at, req.headers, req.body)
	if ok {
		req.doc = doc
		return false
	}
	code := touba.IntakeFiltered
	a := filteredAnswer{Status: touba.IntakeFiltered}
	if err != nil {
		code = touba.EExpressionFailed
		a.Code, a.Message = code, touba.ErrorMessage(err)
		in.Logger.Warn().Str("trigger_ref", t.Ref).Str("event_id", req.eventID).Str("code", code).
			Str("reason", a.Message).Msg("filter expression failed; delivery filtered")
	}
	httpjson.Write(w, http.StatusAccepted, a)
	in.record(r, req, http.StatusAccepted, code, "")
	in.observe(t.Ref, code, http.StatusAccepted)
	return true
}

// Takes reports whether t's filter takes a delivery (true when t has
// none): intake's decision, for anything that asks it of a stored
// delivery too. A {"cel": EXPR} item that fails gives false and an
// ExpressionFailed error.
func (t *Trigger) Takes(eventID string, at time.Time, headers map[string]string, body []byte) (bool, error) {
	ok, _, err := t.takes(eventID, at, headers, body)
	return ok, err
}

// takes is Takes, and the document it decoded (nil when t has no
// filter), which the routes' filters read too (SetRoutes).
func (t *Trigger) takes(eventID string, at time.Time, headers map[string]string, body []byte) (bool, map[string]any, error) {
	if len(t.Filter) == 0 {
		return true, nil, nil
	}
	doc := filterDoc(headers, body)
	ok, err := passes(t.Filter, doc, func() *expr.Vars {
		return &expr.Vars{TriggerRef: t.Ref, EventID: eventID, ReceivedAt: touba.FormatTime(at),
			Headers: headers, Body: doc["body"]}
	})
	return ok, doc, err
}

type filteredAnswer struct {
	Status  string `json:"status"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}
