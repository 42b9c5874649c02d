package entrysearch

import (
	"bytes"
	"encoding/json"
	"reflect"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// BodyMatcher tests stored bodies against an EntrySearch's Pointer and
// Value, for the backends' scans.
type BodyMatcher struct {
	ptr  string
	want any
}

// NewBodyMatcher compiles pointer and value; a nil matcher (pointer and
// value both empty) matches every body.
func NewBodyMatcher(pointer string, value json.RawMessage) (*BodyMatcher, error) {
	if pointer == "" && value == nil {
		return nil, nil
	}
	if _, err := jsonptr.Parse(pointer); err != nil {
		return nil, touba.Errorf(touba.EBadRequest, "body pointer %q: %v", pointer, err)
	}
	want, err := decodeJSON(value)
	if err != nil {
		return nil, touba.Errorf(touba.EBadRequest, "body value: %v", err)
	}
	return &BodyMatcher{ptr: pointer, want: want}, nil
}

// Match reports whether body is JSON holding the wanted value at the
// pointer. Numbers compare by their decimal text after normalisation by
// encoding/json (10 and 10.0 differ; 1e1 and 10 differ).
func (m *BodyMatcher) Match(body []byte) bool {
	if m == nil {
		return true
	}
	doc, err := decodeJSON(body)
	if err != nil {
		return false
	}
	cur, err := jsonptr.Get(doc, m.ptr)
	if err != nil {
		return false
	}
	return reflect.DeepEqual(cur, m.want)
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
