// Package strictjson is the one strict JSON loader of the program file and
// the manifest: it reads a document into a tree of nodes, refusing bad
// syntax, duplicate keys, excessive nesting and trailing data, and checks
// typed fields, recording each refusal as a *touba.ConfigError that names
// the file, the path of the value and the rule.
//
// Paths have one syntax: `$` is the document, `.key` an identifier key,
// `["key"]` (JSON-quoted) any other key such as a tool ref or `$ref`, and
// `[3]` an array position: `$.bindings["tool:a/B"].effect_contract.kind`,
// `$.triggers[0].steps[1].input.x["$ref"]`.
//
// One behaviour for refusals: a Reader records every refusal it issues (up
// to MaxErrors, in the order issued) and Err returns them all. Each check
// also returns its refusal, so a loader that cannot go on after a bad value
// returns at once and reports that one.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Kind is the JSON type of a node.
type Kind int

// The JSON types.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

// String names the kind as a message says it.
func (k Kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// Node is one decoded JSON value. Documents are walked as a tree of nodes
// rather than decoded into structs because strict loading needs the exact
// path of every refusal, the order of keys, and duplicate keys, none of
// which encoding/json's struct decoding reports.
type Node struct {
	Kind  Kind
	Bool  bool
	Text  string  // a string's value, or a number as written
	Items []*Node // array elements
	Keys  []string
	Vals  []*Node // object members, in document order
	Raw   []byte  // the value's bytes in the document, for values kept as written
}

// MaxDepth bounds nesting: a real manifest is six levels deep, a program's
// step input a few more, and a hostile file must not exhaust the stack.
const MaxDepth = 64

// Decode parses exactly one JSON document. A refusal is recorded in r at
// the path where it happened; the tree is nil then.
func (r *Reader) Decode(data []byte) *Node {
	d := &decoder{dec: json.NewDecoder(bytes.NewReader(data)), data: data, r: r}
	d.dec.UseNumber()
	root, err := d.node("$", 0)
	if err != nil {
		at := "$"
		var se *syntaxError
		if errors.As(err, &se) {
			at, err = se.path, se.err
		}
		r.Fail(at, "invalid JSON at %s: %s", position(data, int(d.dec.InputOffset())), describe(err))
		return nil
	}
	if root == nil {
		return nil
	}
	// Anything but JSON whitespace after the document is refused: a second
	// document or a stray brace usually means a bad merge or edit.
	off := int(d.dec.InputOffset())
	for off < len(data) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
		off++
	}
	if off < len(data) {
		r.Fail("$", "trailing data after the JSON document (at %s)", position(data, off))
		return nil
	}
	return root
}

// position names byte off of data as an editor shows it: line and column
// (both from 1; the column counts bytes), with the byte offset.
func position(data []byte, off int) string {
	off = min(max(off, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(data[:off], '\n')
	return fmt.Sprintf("line %d, column %d (byte %d)", line, col, off)
}

// describe turns a decoder error into a short rule text.
func describe(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

type decoder struct {
	dec  *json.Decoder
	data []byte
	r    *Reader
}

// node reads one value. It returns (nil, nil) after recording a structural
// refusal (depth, duplicate key) and an error for bad syntax.
func (d *decoder) node(path string, depth int) (*Node, error) {
	if depth > MaxDepth {
		d.r.Fail(path, "nesting deeper than %d levels", MaxDepth)
		return nil, nil
	}
	start := int(d.dec.InputOffset())
	n, err := d.value(path, depth)
	if n != nil {
		// The offset before the value may still stand before the ':' or
		// ',' that leads to it.
		n.Raw = bytes.TrimLeft(d.data[start:d.dec.InputOffset()], " \t\r\n:,")
	}
	return n, err
}

func (d *decoder) value(path string, depth int) (*Node, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, &syntaxError{path, err}
	}
	switch t := tok.(type) {
	case nil:
		return &Node{Kind: Null}, nil
	case bool:
		return &Node{Kind: Bool, Bool: t}, nil
	case json.Number:
		return &Node{Kind: Number, Text: string(t)}, nil
	case string:
		return &Node{Kind: String, Text: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &Node{Kind: Array}
			for d.dec.More() {
				item, err := d.node(Index(path, len(n.Items)), depth+1)
				if item == nil || err != nil {
					return nil, err
				}
				n.Items = append(n.Items, item)
			}
			return n, d.close(path)
		case '{':
			n := &Node{Kind: Object}
			seen := map[string]bool{}
			for d.dec.More() {
				kt, err := d.dec.Token()
				if err != nil {
					return nil, &syntaxError{path, err}
				}
				key, _ := kt.(string) // the decoder only yields strings as keys
				at := Child(path, key)
				if seen[key] {
					// encoding/json would silently keep the last one, so a
					// second "max_body_bytes" could raise a limit nobody
					// reads in the file.
					d.r.Fail(at, "duplicate key")
					return nil, nil
				}
				seen[key] = true
				val, err := d.node(at, depth+1)
				if val == nil || err != nil {
					return nil, err
				}
				n.Keys = append(n.Keys, key)
				n.Vals = append(n.Vals, val)
			}
			return n, d.close(path)
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// close consumes the "]" or "}" that ends an array or object.
func (d *decoder) close(path string) error {
	if _, err := d.dec.Token(); err != nil {
		return &syntaxError{path, err}
	}
	return nil
}

// syntaxError is bad JSON met while reading the value at path, so that the
// refusal points near the mistake rather than at the whole document.
type syntaxError struct {
	path string
	err  error
}

func (e *syntaxError) Error() string { return e.err.Error() }
