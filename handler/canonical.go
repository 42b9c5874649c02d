package handler

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// maxCanonicalDepth bounds nesting so a hostile document cannot exhaust the
// stack.
const maxCanonicalDepth = 1000

// Canonical returns the canonical form of one JSON document, the form that
// effect fingerprints are computed over:
//
//   - object members sorted by the bytes of their UTF-8 decoded keys (this
//     differs from RFC 8785's UTF-16 order only for keys mixing characters
//     above U+FFFF with ones in U+E000..U+FFFF);
//   - no insignificant whitespace;
//   - numbers exactly as written (1.0, 1e3, -0 and 12345678901234567890 are
//     kept verbatim, never passed through float64);
//   - strings re-escaped minimally: only '"', '\\' and control characters
//     are escaped (\b \f \n \r \t, else \u00xx in lowercase hex); every
//     other character, including '/', '<' and U+2028, is written as UTF-8.
//
// Documents whose meaning is ambiguous are refused rather than guessed at:
// duplicate keys, invalid UTF-8, lone surrogate escapes, trailing data.
func Canonical(doc []byte) ([]byte, error) {
	return AppendCanonical(make([]byte, 0, len(doc)), doc)
}

// AppendCanonical appends the canonical form of doc to dst, as Canonical
// writes it; on an error dst comes back as it was given. A run writes the
// bodies of /events straight into its step's input with it (issue 43).
func AppendCanonical(dst, doc []byte) ([]byte, error) {
	n := len(dst)
	p := canon{in: doc, out: dst}
	p.skipSpace()
	if err := p.value(0); err != nil {
		return p.out[:n], err
	}
	p.skipSpace()
	if p.i != len(p.in) {
		return p.out[:n], p.errorf("trailing data")
	}
	return p.out, nil
}

// Fingerprint returns "sha256:<hex>" of the canonical JSON of
// {"input": input, "operation": operation, "tool_ref": toolRef} (SPEC §4).
// An empty input counts as null.
func Fingerprint(toolRef, operation string, input json.RawMessage) (string, error) {
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	ci, err := Canonical(input)
	if err != nil {
		return "", fmt.Errorf("fingerprint input: %w", err)
	}
	return FingerprintCanonical(toolRef, operation, ci)
}

// FingerprintCanonical is Fingerprint of an input already in canonical
// form (what Canonical returns), which it does not check again: the
// dispatcher resolves step inputs to that form.
func FingerprintCanonical(toolRef, operation string, canonical []byte) (string, error) {
	if !utf8.ValidString(toolRef) || !utf8.ValidString(operation) {
		return "", fmt.Errorf("fingerprint: tool_ref or operation is not valid UTF-8")
	}
	// The document, keys already in canonical order, hashed in pieces
	// rather than copied whole first.
	h := sha256.New()
	h.Write([]byte(`{"input":`))
	h.Write(canonical)
	tail := make([]byte, 0, len(toolRef)+len(operation)+32)
	tail = append(tail, `,"operation":`...)
	tail = appendString(tail, operation)
	tail = append(tail, `,"tool_ref":`...)
	tail = appendString(tail, toolRef)
	h.Write(append(tail, '}'))
	var sum [sha256.Size]byte
	return "sha256:" + hex.EncodeToString(h.Sum(sum[:0])), nil
}

// canon is a one-pass parser that writes the canonical form as it reads.
// Keys and members live on shared stacks, so a document costs a few
// allocations however many objects it holds.
type canon struct {
	in      []byte
	i       int
	out     []byte
	keys    []byte   // decoded keys of the objects being read
	members []member // members of the objects being read
	scratch []byte   // a copy of an object's members while it is reordered
}

// member locates one "key":value pair in out and its key in keys.
type member struct {
	kstart, kend int
	start, end   int
}

func (p *canon) errorf(format string, args ...any) error {
	return fmt.Errorf("canonical json: %s at offset %d", fmt.Sprintf(format, args...), p.i)
}

func (p *canon) skipSpace() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *canon) value(depth int) error {
	if depth > maxCanonicalDepth {
		return p.errorf("nested too deeply")
	}
	if p.i >= len(p.in) {
		return p.errorf("unexpected end")
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str(false)
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.errorf("unexpected %q", c)
	}
}

func (p *canon) literal(word string) error {
	if !bytes.HasPrefix(p.in[p.i:], []byte(word)) {
		return p.errorf("invalid literal")
	}
	p.i += len(word)
	p.out = append(p.out, word...)
	return nil
}

func (p *canon) array(depth int) error {
	p.i++
	p.out = append(p.out, '[')
	p.skipSpace()
	if p.i < len(p.in) && p.in[p.i] == ']' {
		p.i++
		p.out = append(p.out, ']')
		return nil
	}
	for {
		p.skipSpace()
		if err := p.value(depth + 1); err != nil {
			return err
		}
		p.skipSpace()
		if p.i >= len(p.in) {
			return p.errorf("unterminated array")
		}
		switch p.in[p.i] {
		case ',':
			p.i++
			p.out = append(p.out, ',')
		case ']':
			p.i++
			p.out = append(p.out, ']')
			return nil
		default:
			return p.errorf("expected ',' or ']'")
		}
	}
}

func (p *canon) object(depth int) error {
	p.i++
	p.out = append(p.out, '{')
	start := len(p.out)
	p.skipSpace()
	if p.i < len(p.in) && p.in[p.i] == '}' {
		p.i++
		p.out = append(p.out, '}')
		return nil
	}
	base, kbase := len(p.members), len(p.keys)
	for {
		p.skipSpace()
		if p.i >= len(p.in) || p.in[p.i] != '"' {
			return p.errorf("expected a key")
		}
		m := member{start: len(p.out), kstart: len(p.keys)}
		if err := p.str(true); err != nil {
			return err
		}
		m.kend = len(p.keys)
		p.skipSpace()
		if p.i >= len(p.in) || p.in[p.i] != ':' {
			return p.errorf("expected ':'")
		}
		p.i++
		p.out = append(p.out, ':')
		p.skipSpace()
		if err := p.value(depth + 1); err != nil {
			return err
		}
		m.end = len(p.out)
		p.members = append(p.members, m)
		p.skipSpace()
		if p.i >= len(p.in) {
			return p.errorf("unterminated object")
		}
		if p.in[p.i] == '}' {
			p.i++
			break
		}
		if p.in[p.i] != ',' {
			return p.errorf("expected ',' or '}'")
		}
		p.i++
		p.out = append(p.out, ',')
	}
	err := p.sortMembers(start, p.members[base:])
	p.members, p.keys = p.members[:base], p.keys[:kbase]
	return err
}

// sortMembers rewrites the members written from start in key order, and
// closes the object.
func (p *canon) sortMembers(start int, ms []member) error {
	key := func(m member) []byte { return p.keys[m.kstart:m.kend] }
	cmp := func(a, b member) int { return bytes.Compare(key(a), key(b)) }
	if !slices.IsSortedFunc(ms, cmp) {
		slices.SortFunc(ms, cmp)
		p.scratch = append(p.scratch[:0], p.out[start:]...)
		p.out = p.out[:start]
		for k, m := range ms {
			if k > 0 {
				p.out = append(p.out, ',')
			}
			p.out = append(p.out, p.scratch[m.start-start:m.end-start]...)
		}
	}
	for k := 1; k < len(ms); k++ {
		if cmp(ms[k-1], ms[k]) == 0 {
			return p.errorf("duplicate key %q", key(ms[k]))
		}
	}
	p.out = append(p.out, '}')
	return nil
}

// number copies a number verbatim after checking RFC 8259's grammar.
func (p *canon) number() error {
	s := p.i
	if p.in[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.in) && p.in[p.i] == '0':
		p.i++
	case p.i < len(p.in) && p.in[p.i] >= '1' && p.in[p.i] <= '9':
		p.digits()
	default:
		return p.errorf("invalid number")
	}
	if p.i < len(p.in) && p.in[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	if p.i < len(p.in) && (p.in[p.i] == 'e' || p.in[p.i] == 'E') {
		p.i++
		if p.i < len(p.in) && (p.in[p.i] == '+' || p.in[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	p.out = append(p.out, p.in[s:p.i]...)
	return nil
}

func (p *canon) digits() int {
	n := 0
	for p.i < len(p.in) && p.in[p.i] >= '0' && p.in[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}
