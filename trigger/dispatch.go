package trigger

import (
	"github.com/touba/touba-trigger/internal/strictjson"
)

// The dispatch field of a trigger (SPEC §2.1): its weight in fair
// dispatch, the share of the workers its runnable entries get beside the
// other triggers'. It says how soon a run starts, not what it does, so it
// is left out of the trigger's Definition and Digest (definition).

// Weights of fair dispatch.
const (
	DefaultWeight = 10
	maxWeight     = 100
)

// dispatch loads a trigger's dispatch field: {"weight": N}, N in 1–100.
func (w walker) dispatch(path string, raw *strictjson.Node) (int, error) {
	m, err := w.Object(path, raw, []string{"weight"})
	if err != nil {
		return 0, err
	}
	weight := DefaultWeight
	if v, ok := m["weight"]; ok {
		n, err := w.Integer(path+".weight", v, maxWeight)
		if err != nil {
			return 0, err
		}
		weight = int(n)
	}
	return weight, nil
}

// runFields is the trigger's object without the fields that do not change
// what a run does (dispatch), as the bytes its Definition is made from.
// The object is written back member by member, each value as written, so
// a trigger without those fields keeps its exact bytes.
func runFields(raw *strictjson.Node) []byte {
	skip := -1
	for i, k := range raw.Keys {
		if k == "dispatch" {
			skip = i
		}
	}
	if skip < 0 {
		return raw.Raw
	}
	out := []byte{'{'}
	for i, k := range raw.Keys {
		if i == skip {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, strictjson.Quote(k)...)
		out = append(out, ':')
		out = append(out, raw.Vals[i].Raw...)
	}
	return append(out, '}')
}
