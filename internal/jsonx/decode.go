package jsonx

import (
	"encoding/json"
	"unicode"
	"unicode/utf16"
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
// string with an escape or with bytes that are not UTF-8 is unquoted as
// encoding/json unquotes it, unquote; a repeated key keeps its last
// value).
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
// that str accepts is unquoted as encoding/json unquotes it.
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
			return unquote(seg), i + 1, true
		case c == '\\':
			j, ok := str(b, i)
			if !ok {
				return "", j, false
			}
			return unquote(b[start : j-1]), j, true
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

// unquote is a string's content (between its quotes, checked by str)
// as encoding/json's unquote makes it: escapes replaced, a \u escape of a
// lone surrogate and each byte that is not UTF-8 made U+FFFD.
func unquote(s []byte) string {
	b := make([]byte, 0, len(s)+utf8.UTFMax)
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			switch e := s[r+1]; e {
			case 'b':
				b, r = append(b, '\b'), r+2
			case 'f':
				b, r = append(b, '\f'), r+2
			case 'n':
				b, r = append(b, '\n'), r+2
			case 'r':
				b, r = append(b, '\r'), r+2
			case 't':
				b, r = append(b, '\t'), r+2
			case 'u':
				rr := u4(s[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, u4(s[r+2:])); dec != unicode.ReplacementChar {
							b, r = utf8.AppendRune(b, dec), r+6
							break
						}
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
			default: // '"', '\\', '/'
				b, r = append(b, e), r+2
			}
		case c < utf8.RuneSelf:
			b, r = append(b, c), r+1
		default:
			rr, size := utf8.DecodeRune(s[r:])
			b, r = utf8.AppendRune(b, rr), r+size
		}
	}
	return string(b)
}

// u4 reads the four hex digits str checked.
func u4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r*16 + rune(c)
	}
	return r
}
