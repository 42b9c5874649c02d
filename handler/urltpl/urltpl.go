// Package urltpl parses and expands the URL templates of http bindings
// (SPEC §2.2 kind "http"): an absolute http or https URL whose scheme, host
// and port are literal and whose path segments and query values may hold
// {/pointer} placeholders, RFC 6901 JSON pointers into the step's input.
// Each value is percent-encoded as one segment or one value, so that an
// input can never add a segment, a parameter or a host to the request.
package urltpl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/touba/touba-trigger/internal/jsonptr"
)

// Template is a parsed URL template.
type Template struct {
	raw   string
	base  string
	parts []part
	ptrs  []string
}

// part is literal text of the URL, or a placeholder.
type part struct {
	text    string // literal text, or the placeholder's pointer
	ptr     bool
	inPath  bool // a path placeholder: the value must be a whole, real segment
	toks    []string
	segment bool // the placeholder is its segment's whole text
}

// value is what the placeholder p resolves to in input, as text: a
// string, number or boolean, never nothing.
func (p part) value(input any) (string, error) {
	v, ok := jsonptr.Walk(input, p.toks)
	if !ok {
		return "", fmt.Errorf("placeholder {%s} resolves to nothing", p.text)
	}
	s, err := scalar(v)
	if err != nil {
		return "", fmt.Errorf("placeholder {%s} resolves to %s, not a string, number or boolean", p.text, err)
	}
	return s, nil
}

// Parse reads a template. Its errors say what rule the template breaks,
// without quoting it (a URL may hold a credential).
func Parse(s string) (*Template, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return nil, errors.New("must be an absolute http or https URL")
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	if strings.ContainsAny(authority, "{}") {
		return nil, errors.New("the scheme, host and port must be literal: a placeholder may only stand in a path segment or a query value")
	}
	u, err := url.Parse(scheme + "://" + authority)
	switch {
	case err != nil || u.Host == "" || u.Hostname() == "":
		return nil, errors.New("must be an absolute http or https URL with a host")
	case u.User != nil:
		return nil, errors.New("must not contain user info; send credentials in a header from a secret instead")
	case !validPort(u.Port()):
		return nil, errors.New("has a port out of range 1-65535")
	}
	t := &Template{raw: s, base: scheme + "://" + authority, parts: []part{{text: scheme + "://" + authority}}}
	if err := t.scan(rest[end:]); err != nil {
		return nil, err
	}
	return t, nil
}

// scan reads the path and query after the authority.
func (t *Template) scan(s string) error {
	inQuery, inKey := false, false
	segStart := true // the next character begins a path segment
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return errors.New("a placeholder { is not closed by }")
			}
			ptr := s[i+1 : i+j]
			if inQuery && inKey {
				return errors.New("a placeholder may only stand in a path segment or a query value, not in a query key")
			}
			toks, err := jsonptr.Parse(ptr)
			if err != nil || ptr == "" {
				return fmt.Errorf("placeholder {%s} is not a JSON pointer starting with /", ptr)
			}
			if strings.ContainsAny(ptr, "{") {
				return fmt.Errorf("placeholder {%s} holds a {", ptr)
			}
			next := i + j + 1
			whole := !inQuery && segStart && (next == len(s) || s[next] == '/' || s[next] == '?')
			t.parts = append(t.parts, part{text: ptr, ptr: true, inPath: !inQuery, toks: toks, segment: whole})
			t.addPtr(ptr)
			segStart = false
			i = next
			continue
		case c == '}':
			return errors.New("a } closes no placeholder")
		case c == '#':
			return errors.New("must not have a fragment (it is never sent)")
		case c == '?' && !inQuery:
			inQuery, inKey = true, true
		case c == '&' && inQuery:
			inKey = true
		case c == '=' && inQuery:
			inKey = false
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return errors.New("has a % that is not followed by two hex digits")
			}
		case c <= ' ' || c >= 0x7f || strings.IndexByte(`"<>[\]^`+"`|", c) >= 0:
			return fmt.Errorf("has a character that must be percent-encoded (%q)", c)
		}
		segStart = !inQuery && c == '/'
		t.literal(s[i : i+1])
		i++
	}
	return nil
}

func (t *Template) literal(s string) {
	if n := len(t.parts); n > 0 && !t.parts[n-1].ptr {
		t.parts[n-1].text += s
		return
	}
	t.parts = append(t.parts, part{text: s})
}

func (t *Template) addPtr(p string) {
	for _, q := range t.ptrs {
		if q == p {
			return
		}
	}
	t.ptrs = append(t.ptrs, p)
}

// Shown is the template as check prints it: as written, but with each
// literal query value replaced by "…", since a token in a query is the
// common way of putting a credential in a URL. Placeholders are shown.
func (t *Template) Shown() string {
	base, rest, _ := strings.Cut(t.raw[len(t.base):], "?")
	if rest == "" {
		return t.base + base
	}
	params := strings.Split(rest, "&")
	for i, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if ok && v != "" && !(strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") && strings.Count(v, "{") == 1) {
			params[i] = k + "=…"
		}
	}
	return t.base + base + "?" + strings.Join(params, "&")
}

// String is the template as written.
func (t *Template) String() string { return t.raw }

// Pointers are the input pointers the template reads, in order, each once.
func (t *Template) Pointers() []string { return append([]string(nil), t.ptrs...) }

// Base is the literal scheme://host[:port] of the template.
func (t *Template) Base() string { return t.base }

// Expand fills the placeholders from input, a decoded JSON document
// (encoding/json with UseNumber, or plain any trees). A placeholder that
// resolves to nothing, to null or to an object or array is an error naming
// the pointer, never a request; so is a path placeholder that resolves to
// "", and a path segment holding a placeholder that is "." or ".." once
// expanded ({/a}{/b} with "." and ".", {/a}. with "."), which would move
// the request to another path.
func (t *Template) Expand(input any) (string, error) {
	var b strings.Builder
	var spans []span // where path placeholders' values are in b
	for _, p := range t.parts {
		if !p.ptr {
			b.WriteString(p.text)
			continue
		}
		s, err := p.value(input)
		if err != nil {
			return "", err
		}
		if p.inPath && (s == "" || p.segment && (s == "." || s == "..")) {
			return "", fmt.Errorf("placeholder {%s} resolves to %q, which is no path segment", p.text, s)
		}
		start := b.Len()
		b.WriteString(Escape(s))
		if p.inPath {
			spans = append(spans, span{start, b.Len(), p.text})
		}
	}
	out := b.String()
	if err := checkDotSegments(out, len(t.base), spans); err != nil {
		return "", err
	}
	return out, nil
}

// span is where a path placeholder's value stands in an expanded URL.
type span struct {
	start, end int
	ptr        string
}

// checkDotSegments refuses a path segment of u (its path starts at from)
// that holds a placeholder's value and is "." or "..", percent-encoded
// dots included (a server decodes %2E before it resolves dot segments).
// The rule holds on the whole segment, after expansion: the value of one
// placeholder may be no dot segment while the segment it makes with its
// neighbours is.
func checkDotSegments(u string, from int, spans []span) error {
	path := u[from:]
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	start := from
	for _, seg := range strings.Split(path, "/") {
		end := start + len(seg)
		for _, sp := range spans {
			if sp.start < end && sp.end > start {
				if d, err := url.PathUnescape(seg); err == nil && (d == "." || d == "..") {
					return fmt.Errorf("placeholder {%s} makes the path segment %q, which is no path segment", sp.ptr, d)
				}
				break
			}
		}
		start = end + 1
	}
	return nil
}

// scalar is v as text, or an error naming what it is.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", errors.New("null")
	case map[string]any:
		return "", errors.New("an object")
	case []any:
		return "", errors.New("an array")
	}
	return "", fmt.Errorf("a %T", v)
}

// Escape percent-encodes every byte of s but the unreserved characters of
// RFC 3986 (letters, digits, "-", ".", "_", "~"): the result is one path
// segment or one query value whatever s holds ("a/b c" is "a%2Fb%20c").
func Escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validPort tells whether a URL's port is absent or 1-65535.
func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
