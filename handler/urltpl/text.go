package urltpl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/touba/touba-trigger/internal/jsonptr"
)

// Text is a plain-text template with the same {/pointer} placeholders as a
// URL template: a broker binding's NATS subject or Kafka record key (SPEC
// §2.2 "Broker destinations"). The literal text is kept as written; each
// value is put in by the encoder the caller gives Expand, so that an input
// cannot add a token to a subject.
type Text struct {
	raw   string
	parts []part
	ptrs  []string
}

// ParseText reads a text template. Its errors name the rule it breaks.
func ParseText(s string) (*Text, error) {
	t := &Text{raw: s}
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return nil, errors.New("a placeholder { is not closed by }")
			}
			ptr := s[i+1 : i+j]
			toks, err := jsonptr.Parse(ptr)
			if err != nil || ptr == "" {
				return nil, fmt.Errorf("placeholder {%s} is not a JSON pointer starting with /", ptr)
			}
			if strings.ContainsAny(ptr, "{") {
				return nil, fmt.Errorf("placeholder {%s} holds a {", ptr)
			}
			t.parts = append(t.parts, part{text: ptr, ptr: true, toks: toks})
			if !containsStr(t.ptrs, ptr) {
				t.ptrs = append(t.ptrs, ptr)
			}
			i += j + 1
		case '}':
			return nil, errors.New("a } closes no placeholder")
		default:
			if n := len(t.parts); n > 0 && !t.parts[n-1].ptr {
				t.parts[n-1].text += s[i : i+1]
			} else {
				t.parts = append(t.parts, part{text: s[i : i+1]})
			}
			i++
		}
	}
	return t, nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// String is the template as written.
func (t *Text) String() string { return t.raw }

// Pointers are the input pointers the template reads, in order, each once.
func (t *Text) Pointers() []string { return append([]string(nil), t.ptrs...) }

// Literal tells whether the template holds no placeholder.
func (t *Text) Literal() bool { return len(t.ptrs) == 0 }

// Expand fills the placeholders from input (a decoded JSON document, as
// for Template.Expand), each value as encode returns it (nil: as it is). A
// placeholder that resolves to nothing, to null, to an object or an array,
// or to "" is an error naming the pointer.
func (t *Text) Expand(input any, encode func(string) string) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if !p.ptr {
			b.WriteString(p.text)
			continue
		}
		s, err := p.value(input)
		if err != nil {
			return "", err
		}
		if s == "" {
			return "", fmt.Errorf("placeholder {%s} resolves to \"\"", p.text)
		}
		if encode != nil {
			s = encode(s)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// EscapeToken percent-encodes every byte of s but letters, digits, "-",
// "_" and "~": the result is one token of a NATS subject whatever s holds
// (no ".", "*", ">" or white space): "shop.example.com" is
// "shop%2Eexample%2Ecom".
func EscapeToken(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
