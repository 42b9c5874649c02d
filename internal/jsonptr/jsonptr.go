// Package jsonptr evaluates RFC 6901 JSON pointers against decoded JSON
// (values produced by encoding/json with UseNumber, or plain any trees).
package jsonptr

import (
	"errors"
	"strconv"
	"strings"
)

// ErrNotFound is returned when the pointer names nothing in the document.
var ErrNotFound = errors.New("json pointer: no value")

// Parse splits a pointer into its unescaped reference tokens. The empty
// pointer "" names the whole document and yields no tokens.
func Parse(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if ptr[0] != '/' {
		return nil, errors.New(`json pointer must be empty or start with "/"`)
	}
	parts := strings.Split(ptr[1:], "/")
	for i, p := range parts {
		if strings.Contains(p, "~") {
			// "~" must be followed by 0 or 1; "~01" is "~1" literally.
			for j := 0; j < len(p); j++ {
				if p[j] == '~' && (j+1 == len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
					return nil, errors.New(`json pointer: "~" must be followed by "0" or "1"`)
				}
			}
			p = strings.ReplaceAll(p, "~1", "/")
			p = strings.ReplaceAll(p, "~0", "~")
		}
		parts[i] = p
	}
	return parts, nil
}

// Get returns the value at ptr in doc.
func Get(doc any, ptr string) (any, error) {
	toks, err := Parse(ptr)
	if err != nil {
		return nil, err
	}
	v, ok := Walk(doc, toks)
	if !ok {
		return nil, ErrNotFound
	}
	return v, nil
}

// Walk follows reference tokens already parsed (Parse) down doc, for
// callers that resolve one pointer against many documents.
func Walk(doc any, toks []string) (any, bool) {
	cur := doc
	for _, t := range toks {
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[t]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, ok := index(t)
			if !ok || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// index parses an array token: digits only, no leading zero (RFC 6901 §4).
func index(t string) (int, bool) {
	if t == "" || (len(t) > 1 && t[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(t)
	return n, err == nil
}

// Index parses an array token as Get does: digits only, no leading zero.
func Index(t string) (int, bool) { return index(t) }
