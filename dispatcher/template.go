package dispatcher

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/handler"
)

// template is a step's input compiled once per configuration: the JSON
// text of its literal parts, and the $ref pointers between them, in order.
// A run then writes the literal text and each pointer's value, instead of
// decoding the input and walking it every time. The text is canonical
// (handler.Canonical): members in key order, keys and scalars in canonical
// form; with canonical values between its parts, the input is canonical.
type template struct {
	parts []part
	size  int // bytes of literal text
	cels  map[string]*expr.Expr
	// events: a pointer names /events or the whole document, whose
	// value is as large as the gathering (resolve sizes its output).
	events bool
}

type part struct {
	text []byte // literal JSON text, when !ref and cel is nil
	ref  bool
	ptr  string
	cel  *expr.Expr // a {"$cel": EXPR} value (SPEC §2.4)
}

// nullInput stands for an empty input, at one address for the cache.
var nullInput = json.RawMessage("null")

// templateKey names an input by where its bytes are: inputs are the
// program's, which a configuration never changes (and the cache keeps
// them alive, so no other input can come to the same address).
type templateKey struct {
	first *byte
	n     int
}

// template returns input compiled, from the configuration's cache. cels
// are the step's {"$cel": EXPR} values compiled at load, by their text.
func (c *Config) template(input json.RawMessage, cels map[string]*expr.Expr) (*template, error) {
	if len(input) == 0 {
		input = nullInput
	}
	key := templateKey{&input[0], len(input)}
	if t, ok := c.templates.Load(key); ok {
		return t.(*template), nil
	}
	t, err := compile(input, cels)
	if err != nil {
		return nil, err
	}
	c.templates.Store(key, t)
	return t, nil
}

func compile(input json.RawMessage, cels map[string]*expr.Expr) (*template, error) {
	v, err := decode(input)
	if err != nil {
		return nil, err
	}
	t := &template{cels: cels}
	var lit []byte
	if lit, err = t.emit(lit, v); err != nil {
		return nil, err
	}
	t.flush(lit)
	return t, nil
}

// emit appends v's JSON text to lit; a {"$ref": pointer} object (its only
// member) ends the literal text before it and becomes a pointer part.
func (t *template) emit(lit []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"]; ok && len(x) == 1 {
			ptr, _ := ref.(string) // not a string: "", the whole document, as before
			t.flush(lit)
			t.parts = append(t.parts, part{ref: true, ptr: ptr})
			if ptr == "" || ptr == "/events" || strings.HasPrefix(ptr, "/events/") {
				t.events = true
			}
			return nil, nil
		}
		if src, ok := x["$cel"].(string); ok && len(x) == 1 {
			cel := t.cels[src]
			if cel == nil {
				return nil, fmt.Errorf("$cel %q was not compiled with the program", src)
			}
			t.flush(lit)
			t.parts = append(t.parts, part{cel: cel})
			return nil, nil
		}
		lit = append(lit, '{')
		for i, k := range slices.Sorted(maps.Keys(x)) {
			if i > 0 {
				lit = append(lit, ',')
			}
			kb, err := canonical(k)
			if err != nil {
				return nil, err
			}
			lit = append(append(lit, kb...), ':')
			if lit, err = t.emit(lit, x[k]); err != nil {
				return nil, err
			}
		}
		return append(lit, '}'), nil
	case []any:
		lit = append(lit, '[')
		for i, e := range x {
			if i > 0 {
				lit = append(lit, ',')
			}
			var err error
			if lit, err = t.emit(lit, e); err != nil {
				return nil, err
			}
		}
		return append(lit, ']'), nil
	}
	b, err := canonical(v)
	return append(lit, b...), err
}

// canonical is the canonical JSON of a decoded value (a template's scalar
// or key, or what a $ref names).
func canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return handler.Canonical(b)
}

func (t *template) flush(lit []byte) {
	if len(lit) > 0 {
		t.parts = append(t.parts, part{text: lit})
		t.size += len(lit)
	}
}
