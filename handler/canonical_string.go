package handler

import (
	"unicode/utf16"
	"unicode/utf8"
)

// str reads one string and writes it re-escaped; with key it also pushes
// the decoded text on p.keys.
func (p *canon) str(key bool) error {
	p.i++
	p.out = append(p.out, '"')
	for {
		if p.i >= len(p.in) {
			return p.errorf("unterminated string")
		}
		// A run of plain ASCII (no quote, backslash or control character)
		// is written as read, in one copy: most of most strings.
		if j := plainRun(p.in, p.i); j > p.i {
			p.out = append(p.out, p.in[p.i:j]...)
			if key {
				p.keys = append(p.keys, p.in[p.i:j]...)
			}
			p.i = j
			continue
		}
		c := p.in[p.i]
		var r rune
		switch {
		case c == '"':
			p.i++
			p.out = append(p.out, '"')
			return nil
		case c == '\\':
			var err error
			if r, err = p.escape(); err != nil {
				return err
			}
		case c < 0x20:
			return p.errorf("control character in string")
		case c < utf8.RuneSelf:
			r = rune(c)
			p.i++
		default:
			var size int
			r, size = utf8.DecodeRune(p.in[p.i:])
			if r == utf8.RuneError && size == 1 {
				return p.errorf("invalid UTF-8")
			}
			p.i += size
		}
		p.out = appendRune(p.out, r)
		if key {
			p.keys = utf8.AppendRune(p.keys, r)
		}
	}
}

// plainRun returns the end of the run of bytes from i that a canonical
// string writes as they are: printable ASCII but the quote and backslash.
func plainRun(b []byte, i int) int {
	for i < len(b) {
		if c := b[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return i
		}
		i++
	}
	return i
}

// escape decodes one backslash escape, pairing UTF-16 surrogates.
func (p *canon) escape() (rune, error) {
	if p.i+1 >= len(p.in) {
		return 0, p.errorf("unterminated escape")
	}
	c := p.in[p.i+1]
	p.i += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r1, ok := p.hex4()
		if !ok {
			return 0, p.errorf("invalid \\u escape")
		}
		if !utf16.IsSurrogate(r1) {
			return r1, nil
		}
		if r1 >= 0xDC00 || p.i+1 >= len(p.in) || p.in[p.i] != '\\' || p.in[p.i+1] != 'u' {
			return 0, p.errorf("lone surrogate")
		}
		p.i += 2
		r2, ok := p.hex4()
		if r := utf16.DecodeRune(r1, r2); ok && r != utf8.RuneError {
			return r, nil
		}
		return 0, p.errorf("lone surrogate")
	default:
		return 0, p.errorf("invalid escape")
	}
}

func (p *canon) hex4() (rune, bool) {
	if p.i+4 > len(p.in) {
		return 0, false
	}
	var r rune
	for _, c := range p.in[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// appendRune writes r in canonical string form (without quotes).
func appendRune(dst []byte, r rune) []byte {
	switch r {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		const hexDigits = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xF])
	}
	return utf8.AppendRune(dst, r)
}

// appendString writes s, valid UTF-8, as a canonical JSON string.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		dst = appendRune(dst, r)
	}
	return append(dst, '"')
}
