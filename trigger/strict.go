package trigger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	touba "github.com/touba/touba-trigger"
)

// ConfigError is a refusal of the program file; the manifest loader
// refuses with the same type.
type ConfigError = touba.ConfigError

// walker decodes a JSON document piece by piece so that every refusal can
// name the exact path.
type walker struct{ file string }

func (w walker) fail(path, format string, args ...any) error {
	return &ConfigError{File: w.file, Path: path, Rule: fmt.Sprintf(format, args...)}
}

// object decodes raw as an object and refuses keys outside allowed and
// missing required keys (those listed in required).
func (w walker) object(path string, raw json.RawMessage, allowed []string, required ...string) (map[string]json.RawMessage, error) {
	if isNull(raw) {
		return nil, w.fail(path, "must be an object, not null")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, w.fail(path, "must be an object")
	}
	if k, ok := duplicateKey(raw); ok {
		return nil, w.fail(path+"."+k, "duplicate key")
	}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		if !contains(allowed, k) {
			return nil, w.fail(path+"."+k, "unknown field")
		}
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			return nil, w.fail(path+"."+k, "required field missing")
		}
	}
	return m, nil
}

func (w walker) str(path string, raw json.RawMessage) (string, error) {
	var s string
	if isNull(raw) || json.Unmarshal(raw, &s) != nil {
		return "", w.fail(path, "must be a string")
	}
	return s, nil
}

// integer decodes a JSON integer within [min, max] without going through
// float64, so 1e3 or 1.5 are refused rather than silently truncated.
func (w walker) integer(path string, raw json.RawMessage, min, max int64) (int64, error) {
	// Decoding into any (not json.Number) so that a quoted "1024" stays a
	// string and is refused.
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var n json.Number
	ok := false
	if dec.Decode(&v) == nil {
		n, ok = v.(json.Number)
	}
	if !ok {
		return 0, w.fail(path, "must be an integer")
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, w.fail(path, "must be an integer")
	}
	if i < min || i > max {
		return 0, w.fail(path, "must be between %d and %d", min, max)
	}
	return i, nil
}

func (w walker) array(path string, raw json.RawMessage) ([]json.RawMessage, error) {
	var a []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &a) != nil {
		return nil, w.fail(path, "must be an array")
	}
	return a, nil
}

// duplicateKey finds a key given twice in the object raw: encoding/json
// would silently keep the last one, so a second "max_body_bytes" could
// raise a limit nobody reads in the file.
func duplicateKey(raw json.RawMessage) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := tok.(string)
		if seen[k] {
			return k, true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func idx(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
