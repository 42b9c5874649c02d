package manifest

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// fields are an object's known members, by key.
type fields map[string]*node

// object checks that n is an object whose keys are all allowed, reporting
// each unknown key at its own path, and returns the known members.
func (p *problems) object(path string, n *node, allowed ...string) (fields, bool) {
	if !p.is(path, n, kindObject) {
		return nil, false
	}
	f := fields{}
	for i, k := range n.keys {
		if !slices.Contains(allowed, k) {
			known := slices.Clone(allowed)
			slices.Sort(known)
			p.add(child(path, k), "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		f[k] = n.vals[i]
	}
	return f, true
}

// is checks the JSON type of n. Null gets its own rule: the spec refuses a
// null contract explicitly, and no field of the manifest is nullable.
func (p *problems) is(path string, n *node, want kind) bool {
	switch {
	case n.kind == want:
		return true
	case n.kind == kindNull:
		p.add(path, "must not be null")
	default:
		p.add(path, "must be %s (got %s)", article(want), n.kind)
	}
	return false
}

// article renders "a string", "an object" and so on.
func article(k kind) string {
	if k == kindObject || k == kindArray {
		return "an " + k.String()
	}
	return "a " + k.String()
}

// required returns the member key of f, or reports it missing.
func (p *problems) required(path string, f fields, key string) (*node, bool) {
	n, ok := f[key]
	if !ok {
		p.add(child(path, key), "required field is missing")
	}
	return n, ok
}

// str reads a string.
func (p *problems) str(path string, n *node) (string, bool) {
	if !p.is(path, n, kindString) {
		return "", false
	}
	return n.text, true
}

// nonEmpty reads a string that must not be empty.
func (p *problems) nonEmpty(path string, n *node) (string, bool) {
	s, ok := p.str(path, n)
	if ok && s == "" {
		p.add(path, "must not be empty")
		return "", false
	}
	return s, ok
}

// boolean reads true or false.
func (p *problems) boolean(path string, n *node) (bool, bool) {
	if !p.is(path, n, kindBool) {
		return false, false
	}
	return n.bool, true
}

// integer reads a whole number written without fraction or exponent, in
// [1, max]: every number of the manifest is a positive count or duration.
func (p *problems) integer(path string, n *node, max int64) (int64, bool) {
	if n.kind == kindNull {
		p.add(path, "must not be null")
		return 0, false
	}
	if n.kind != kindNumber {
		p.add(path, "must be a positive integer (got %s)", n.kind)
		return 0, false
	}
	v, err := strconv.ParseInt(n.text, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(n.text, "-"):
		p.add(path, "must be at most %d (got %s)", max, n.text)
	case err != nil:
		p.add(path, "must be a positive integer (got %s)", n.text)
	case v <= 0:
		p.add(path, "must be a positive integer (got %d)", v)
	case v > max:
		p.add(path, "must be at most %d (got %d)", max, v)
	default:
		return v, true
	}
	return 0, false
}

// strs reads an array of strings; the result is never nil.
func (p *problems) strs(path string, n *node) ([]string, bool) {
	if !p.is(path, n, kindArray) {
		return nil, false
	}
	out, ok := make([]string, 0, len(n.items)), true
	for i, item := range n.items {
		s, good := p.str(index(path, i), item)
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}
