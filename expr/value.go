package expr

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// Vars are the variables of one evaluation: a delivery at intake, or a
// run's context at a step. Body is the decoded JSON (numbers as
// json.Number or float64) or the raw body as a string; nil is JSON null.
// Steps and Events are for Step expressions only. The event map is built
// on first use, so a filter reading body alone allocates none.
type Vars struct {
	TriggerRef string
	EventID    string
	QueueID    string // "" at intake: the queue has not given one yet
	ReceivedAt string // RFC 3339, as /event/received_at
	Headers    map[string]string
	Body       any
	// Steps are the outputs of the steps before, each {"output": value}.
	Steps map[string]any
	// Events are the gathered deliveries, each as event is (EventMap).
	// LoadEvents, when set and Events is nil, gives them on first use:
	// a gathering is read only by an expression that names events. Its
	// error ends the evaluation (EventsErr keeps it for the caller).
	Events     []any
	LoadEvents func() ([]any, error)
	EventsErr  error
	// Event, when set, is event as it is (a run's /event, built already);
	// otherwise it is built from the fields above on first use.
	Event map[string]any
}

// ResolveName gives CEL a variable (interpreter.Activation).
func (v *Vars) ResolveName(name string) (any, bool) {
	switch name {
	case VarBody:
		return v.Body, true
	case VarHeaders:
		if v.Headers == nil {
			return map[string]string{}, true
		}
		return v.Headers, true
	case VarEvent:
		if v.Event == nil {
			v.Event = v.EventMap()
		}
		return v.Event, true
	case VarSteps:
		if v.Steps == nil {
			return map[string]any{}, true
		}
		return v.Steps, true
	case VarEvents:
		if v.Events == nil && v.LoadEvents != nil && v.EventsErr == nil {
			v.Events, v.EventsErr = v.LoadEvents()
			if v.EventsErr != nil {
				return nil, false
			}
		}
		if v.Events == nil {
			return []any{v.EventMap()}, true
		}
		return v.Events, true
	}
	return nil, false
}

// Parent is nil: the variables are all here.
func (v *Vars) Parent() interpreter.Activation { return nil }

// EventMap is v as /event shows it (without queue_id at intake).
func (v *Vars) EventMap() map[string]any {
	h := make(map[string]any, len(v.Headers))
	for k, s := range v.Headers {
		h[k] = s
	}
	m := map[string]any{"trigger_ref": v.TriggerRef, "event_id": v.EventID, "received_at": v.ReceivedAt,
		"headers": h, "body": v.Body}
	if v.QueueID != "" {
		m["queue_id"] = v.QueueID
	}
	return m
}

// adapter turns decoded JSON into CEL values lazily: maps and lists are
// wrapped, not copied, and a number becomes an int when integral (a uint
// past int64), else a double.
type adapter struct{}

func (a adapter) NativeToValue(v any) ref.Val {
	switch x := v.(type) {
	case json.Number:
		return number(string(x))
	case float64:
		if x == math.Trunc(x) && x >= -(1<<63) && x < (1<<63) {
			return types.Int(int64(x))
		}
		return types.Double(x)
	case map[string]any:
		return types.NewStringInterfaceMap(a, x)
	case []any:
		return types.NewDynamicList(a, x)
	case nil:
		return types.NullValue
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// number reads a JSON number as written.
func number(s string) ref.Val {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return types.Int(i)
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return types.Uint(u)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return types.NewErr("invalid JSON number %q", s)
	}
	if f == math.Trunc(f) && f >= -(1<<63) && f < (1<<63) && !isBigInteger(s) {
		// 1.0 or 1e3: integral, so an int as 1 would be.
		return types.Int(int64(f))
	}
	return types.Double(f)
}

// isBigInteger is a number written without fraction or exponent that did
// not fit an int64 or uint64: a double, rounded.
func isBigInteger(s string) bool {
	for _, c := range s {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// marshal writes a CEL value as JSON. Bytes are base64 (standard, padded),
// a timestamp RFC 3339, a duration as CEL writes it ("90s"); a map's keys
// must be strings; NaN and infinities are refused.
func marshal(v ref.Val) ([]byte, error) {
	n, err := native(v, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(n)
}

const maxDepth = 1000

func native(v ref.Val, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", f)
		}
		return f, nil
	case types.String:
		return string(x), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(x), nil
	case types.Timestamp:
		return x.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return string(x.ConvertToType(types.StringType).(types.String)), nil
	case *types.Optional:
		if !x.HasValue() {
			return nil, nil
		}
		return native(x.GetValue(), depth+1)
	case traits.Mapper:
		out := map[string]any{}
		it := x.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("a map key must be a string for JSON, not %s", k.Type().TypeName())
			}
			e, err := native(x.Get(k), depth+1)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	case traits.Lister:
		n, _ := x.Size().(types.Int)
		out := make([]any, 0, int(n))
		it := x.Iterator()
		for it.HasNext() == types.True {
			e, err := native(it.Next(), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	if types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	return nil, fmt.Errorf("a %s has no JSON form", v.Type().TypeName())
}
