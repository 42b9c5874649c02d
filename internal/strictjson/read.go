package strictjson

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	touba "github.com/touba/touba-trigger"
)

// MaxErrors bounds how many refusals one load records: past a few dozen
// the list stops helping, and a hostile file must not produce megabytes of
// text.
const MaxErrors = 50

// Reader checks one document and records its refusals.
type Reader struct {
	File string // names the file in every refusal
	errs []*touba.ConfigError
}

// Fail records a refusal at path and returns it.
func (r *Reader) Fail(path, format string, args ...any) error {
	e := &touba.ConfigError{File: r.File, Path: path, Rule: fmt.Sprintf(format, args...)}
	if len(r.errs) < MaxErrors {
		r.errs = append(r.errs, e)
	}
	return e
}

// FailCode is Fail with a public code other than ConfigInvalid
// (ProgramInvalid for an expression, SPEC §2.4).
func (r *Reader) FailCode(code, path, format string, args ...any) error {
	e := &touba.ConfigError{File: r.File, Path: path, Rule: fmt.Sprintf(format, args...), Code: code}
	if len(r.errs) < MaxErrors {
		r.errs = append(r.errs, e)
	}
	return e
}

// Err returns nil, the single refusal, or all of them joined (one a line);
// errors.As finds the first *ConfigError either way.
func (r *Reader) Err() error {
	switch len(r.errs) {
	case 0:
		return nil
	case 1:
		return r.errs[0]
	}
	all := make([]error, len(r.errs))
	for i, e := range r.errs {
		all[i] = e
	}
	return errors.Join(all...)
}

// Fields are an object's known members, by key.
type Fields map[string]*Node

// Object checks that n is an object whose keys are all allowed (each
// unknown key refused at its own path) and that holds every required key.
// It returns the known members whenever n is an object, with the first
// refusal if any, so that a loader may go on checking what is there.
func (r *Reader) Object(path string, n *Node, allowed []string, required ...string) (Fields, error) {
	if err := r.Is(path, n, Object); err != nil {
		return nil, err
	}
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	f := Fields{}
	for i, k := range n.Keys {
		if !slices.Contains(allowed, k) {
			keep(r.Fail(Child(path, k), "unknown field (known: %s)", strings.Join(slices.Sorted(slices.Values(allowed)), ", ")))
			continue
		}
		f[k] = n.Vals[i]
	}
	for _, k := range required {
		if _, ok := f[k]; !ok {
			keep(r.Fail(Child(path, k), "required field is missing"))
		}
	}
	return f, first
}

// Is checks the JSON type of n. Null gets its own rule: no field of either
// file is nullable, and the manifest's spec refuses a null contract
// explicitly.
func (r *Reader) Is(path string, n *Node, want Kind) error {
	switch {
	case n.Kind == want:
		return nil
	case n.Kind == Null:
		return r.Fail(path, "must not be null")
	default:
		return r.Fail(path, "must be %s (got %s)", article(want), n.Kind)
	}
}

// article renders "a string", "an object" and so on.
func article(k Kind) string {
	if k == Object || k == Array {
		return "an " + k.String()
	}
	return "a " + k.String()
}

// Str reads a string.
func (r *Reader) Str(path string, n *Node) (string, error) {
	return n.Text, r.Is(path, n, String)
}

// NonEmpty reads a string that must not be empty.
func (r *Reader) NonEmpty(path string, n *Node) (string, error) {
	s, err := r.Str(path, n)
	if err == nil && s == "" {
		return "", r.Fail(path, "must not be empty")
	}
	return s, err
}

// Boolean reads true or false.
func (r *Reader) Boolean(path string, n *Node) (bool, error) {
	return n.Bool, r.Is(path, n, Bool)
}

// Array reads an array's items.
func (r *Reader) Array(path string, n *Node) ([]*Node, error) {
	return n.Items, r.Is(path, n, Array)
}

// Integer reads a whole number in [1, max] written without fraction or
// exponent, never going through float64, so 1e3 or 1.5 are refused rather
// than silently truncated, and a quoted "1024" is a string, refused too.
// Every integer of both files is a positive count, size or duration.
func (r *Reader) Integer(path string, n *Node, max int64) (int64, error) {
	if n.Kind == Null {
		return 0, r.Fail(path, "must not be null")
	}
	if n.Kind != Number {
		return 0, r.Fail(path, "must be a positive integer (got %s)", n.Kind)
	}
	v, err := strconv.ParseInt(n.Text, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(n.Text, "-"):
		return 0, r.Fail(path, "must be at most %d (got %s)", max, n.Text)
	case err != nil:
		return 0, r.Fail(path, "must be a positive integer (got %s)", n.Text)
	case v <= 0:
		return 0, r.Fail(path, "must be a positive integer (got %d)", v)
	case v > max:
		return 0, r.Fail(path, "must be at most %d (got %d)", max, v)
	}
	return v, nil
}

// Strs reads an array of strings; the result is never nil. Every bad item
// is refused at its own path.
func (r *Reader) Strs(path string, n *Node) ([]string, error) {
	if err := r.Is(path, n, Array); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(n.Items))
	var first error
	for i, item := range n.Items {
		s, err := r.Str(Index(path, i), item)
		if first == nil {
			first = err
		}
		out = append(out, s)
	}
	return out, first
}
