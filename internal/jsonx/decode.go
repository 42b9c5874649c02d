package jsonx

import (
	"encoding/json"
	"unicode/utf8"
)

// Decode is a json.Decoder with UseNumber decoding b's one value into an
// any (maps, slices, strings, json.Number, bools, nil), about five times
// as fast on a webhook body: intake decodes every body that a filter or a
// route's expression reads, and a 1 KiB body cost encoding/json 7 µs of
// the 13 a delivery's routing took (issue 45).
//
// ok is false where Decode does not answer for encoding/json: anything
// but white space after the value, invalid JSON, nesting past its limit.
// The caller then asks encoding/json, which gives the value or the error
// it always gave. When ok is true, v is what encoding/json gives (a
// string with an escape or with bytes that are not UTF-8 is unquoted by
// encoding/json itself; a repeated key keeps its last value).
func Decode(b []byte) (v any, ok bool) {
	v, i, ok := decodeValue(b, skip(b, 0), 0)
	if !ok || skip(b, i) != len(b) {
		return nil, false
	}
	return v, true
}

func decodeValue(b []byte, i, depth int) (any, int, bool) {
	if i >= len(b) {
		return nil, i, false
	}
	switch c := b[i]; {
	case c == '{':
		return decodeObject(b, i+1, depth+1)
	case c == '[':
		return decodeArray(b, i+1, depth+1)
	case c == '"':
		s, j, ok := decodeString(b, i+1)
		return s, j, ok
	case c == '-' || c >= '0' && c <= '9':
		j, ok := number(b, i)
		if !ok {
			return nil, j, false
		}
		return json.Number(b[i:j]), j, true
	case c == 't':
		j, ok := literal(b, i, "true")
		return true, j, ok
	case c == 'f':
		j, ok := literal(b, i, "false")
		return false, j, ok
	case c == 'n':
		j, ok := literal(b, i, "null")
		return nil, j, ok
	}
	return nil, i, false
}

func decodeObject(b []byte, i, depth int) (any, int, bool) {
	if depth > maxDepth {
		return nil, i, false
	}
	m := map[string]any{}
	i = skip(b, i)
	if i < len(b) && b[i] == '}' {
		return m, i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, i, false
		}
		k, j, ok := decodeString(b, i+1)
		if !ok {
			return nil, j, false
		}
		if i = skip(b, j); i >= len(b) || b[i] != ':' {
			return nil, i, false
		}
		var v any
		if v, i, ok = decodeValue(b, skip(b, i+1), depth); !ok {
			return nil, i, false
		}
		m[k] = v
		if i = skip(b, i); i >= len(b) {
			return nil, i, false
		}
		switch b[i] {
		case '}':
			return m, i + 1, true
		case ',':
			i = skip(b, i+1)
		default:
			return nil, i, false
		}
	}
}

func decodeArray(b []byte, i, depth int) (any, int, bool) {
	if depth > maxDepth {
		return nil, i, false
	}
	a := []any{}
	i = skip(b, i)
	if i < len(b) && b[i] == ']' {
		return a, i + 1, true
	}
	for {
		v, j, ok := decodeValue(b, i, depth)
		if !ok {
			return nil, j, false
		}
		a = append(a, v)
		if i = skip(b, j); i >= len(b) {
			return nil, i, false
		}
		switch b[i] {
		case ']':
			return a, i + 1, true
		case ',':
			i = skip(b, i+1)
		default:
			return nil, i, false
		}
	}
}

// decodeString reads a string whose opening quote is before b[i]. A plain
// one (no escape, no control character, UTF-8) is its bytes; any other
// that str accepts is unquoted by encoding/json, so that escapes and
// invalid bytes come out as they always did.
func decodeString(b []byte, i int) (string, int, bool) {
	start := i
	ascii := true
	for i < len(b) {
		c := b[i]
		if !special[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			seg := b[start:i]
			if ascii || utf8.Valid(seg) {
				return string(seg), i + 1, true
			}
			var s string
			if err := json.Unmarshal(b[start-1:i+1], &s); err != nil {
				return "", i, false
			}
			return s, i + 1, true
		case c == '\\':
			j, ok := str(b, i)
			if !ok {
				return "", j, false
			}
			var s string
			if err := json.Unmarshal(b[start-1:j], &s); err != nil {
				return "", j, false
			}
			return s, j, true
		case c < 0x20:
			return "", i, false
		}
		ascii = false
		i++
	}
	return "", i, false
}

// special marks the bytes decodeString stops at: the quote, the
// backslash, control characters and the bytes of non-ASCII runes.
var special = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf
	}
	return t
}()
