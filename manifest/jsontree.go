package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// kind is the JSON type of a node.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// String names the kind as a message says it.
func (k kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// node is one decoded JSON value. The manifest is walked as a tree of
// nodes rather than decoded into structs because strict loading needs the
// exact path of every refusal, the order of keys, and duplicate keys, none
// of which encoding/json's struct decoding reports.
type node struct {
	kind  kind
	bool  bool
	text  string  // a string's value, or a number as written
	items []*node // array elements
	keys  []string
	vals  []*node // object members, in document order
}

// maxDepth bounds nesting: a real manifest is six levels deep, and a
// hostile one must not exhaust the stack.
const maxDepth = 64

// decodeTree parses exactly one JSON document. Any refusal is recorded in p
// at the path where it happened; the tree is nil then.
func decodeTree(data []byte, p *problems) *node {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	root, err := readNode(dec, "$", 0, p)
	if err != nil {
		at := "$"
		var se *syntaxError
		if errors.As(err, &se) {
			at, err = se.path, se.err
		}
		p.add(at, "invalid JSON at byte %d: %s", dec.InputOffset(), describe(err))
		return nil
	}
	if root == nil {
		return nil
	}
	// Anything but JSON whitespace after the document is refused: a second
	// document or a stray brace usually means a bad merge or edit.
	off := int(dec.InputOffset())
	for off < len(data) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
		off++
	}
	if off < len(data) {
		p.add("$", "trailing data after the JSON document (at byte %d)", off)
		return nil
	}
	return root
}

// describe turns a decoder error into a short rule text.
func describe(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

// readNode reads one value. It returns (nil, nil) after recording a
// structural refusal (depth, duplicate key) and an error for bad syntax.
func readNode(dec *json.Decoder, path string, depth int, p *problems) (*node, error) {
	if depth > maxDepth {
		p.add(path, "nesting deeper than %d levels", maxDepth)
		return nil, nil
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, &syntaxError{path, err}
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kindNull}, nil
	case bool:
		return &node{kind: kindBool, bool: t}, nil
	case json.Number:
		return &node{kind: kindNumber, text: string(t)}, nil
	case string:
		return &node{kind: kindString, text: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &node{kind: kindArray}
			for dec.More() {
				item, err := readNode(dec, index(path, len(n.items)), depth+1, p)
				if item == nil || err != nil {
					return nil, err
				}
				n.items = append(n.items, item)
			}
			return n, closeDelim(dec, path)
		case '{':
			n := &node{kind: kindObject}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, &syntaxError{path, err}
				}
				key, _ := kt.(string) // the decoder only yields strings as keys
				at := child(path, key)
				if seen[key] {
					p.add(at, "duplicate key")
					return nil, nil
				}
				seen[key] = true
				val, err := readNode(dec, at, depth+1, p)
				if val == nil || err != nil {
					return nil, err
				}
				n.keys = append(n.keys, key)
				n.vals = append(n.vals, val)
			}
			return n, closeDelim(dec, path)
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// closeDelim consumes the "]" or "}" that ends an array or object.
func closeDelim(dec *json.Decoder, path string) error {
	if _, err := dec.Token(); err != nil {
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
