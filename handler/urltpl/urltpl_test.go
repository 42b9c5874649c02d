package urltpl_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/handler/urltpl"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestExpand(t *testing.T) {
	input := decode(t, `{"id": "a/b c", "n": 42, "f": 1.5e3, "ok": true, "u": "é?&=#", "obj": {"k": "v"},
		"arr": [1], "nul": null, "empty": "", "dots": "..", "tilde~key": "t", "sl/ash": "s",
		"a": ".", "b": "."}`)
	for _, tc := range []struct{ tpl, want, err string }{
		{"https://api.test/orders/{/id}", "https://api.test/orders/a%2Fb%20c", ""},
		{"https://api.test:8443/o/{/n}/x/{/ok}?q={/u}&lit=a%20b", "https://api.test:8443/o/42/x/true?q=%C3%A9%3F%26%3D%23&lit=a%20b", ""},
		{"http://127.0.0.1:9/o/ord_{/n}-{/f}", "http://127.0.0.1:9/o/ord_42-1.5e3", ""},
		{"http://h/{/tilde~0key}/{/sl~1ash}", "http://h/t/s", ""},
		{"http://h/a?x={/empty}", "http://h/a?x=", ""},
		{"http://h/x/{/obj}", "", "{/obj} resolves to an object"},
		{"http://h/x/{/arr}", "", "{/arr} resolves to an array"},
		{"http://h/x/{/nul}", "", "{/nul} resolves to null"},
		{"http://h/x/{/missing}", "", "{/missing} resolves to nothing"},
		{"http://h/x/{/obj/none}", "", "resolves to nothing"},
		{"http://h/x/{/empty}/y", "", "no path segment"},
		{"http://h/x/{/dots}", "", "no path segment"},
		{"http://h/x/v{/dots}", "http://h/x/v..", ""},
		// Issue 44: the dot-segment rule holds on the segment once
		// expanded, not on each value alone.
		{"https://h/api/users/{/a}{/b}/delete", "", "makes the path segment \"..\""},
		{"https://h/api/users/{/a}./delete", "", "makes the path segment \"..\""},
		{"https://h/api/users/.{/a}/delete", "", "makes the path segment \"..\""},
		{"https://h/api/users/%2E{/a}/delete", "", "makes the path segment \"..\""},
		{"https://h/api/{/a}{/a}", "", "no path segment"},
		{"https://h/api/users/{/a}{/b}{/a}/x", "https://h/api/users/.../x", ""},
		{"https://h/api/users/{/a}x/y?q={/a}{/b}", "https://h/api/users/.x/y?q=..", ""},
		{"https://h/api/./users/{/n}", "https://h/api/./users/42", ""}, // a literal segment is the template's own
	} {
		tpl, err := urltpl.Parse(tc.tpl)
		if err != nil {
			t.Fatalf("%s: %v", tc.tpl, err)
		}
		got, err := tpl.Expand(input)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %q, %v; want error %q", tc.tpl, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %q", tc.tpl, got, err, tc.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ tpl, err string }{
		{"ftp://h/x", "absolute http or https"},
		{"/relative/{/id}", "absolute http or https"},
		{"https://{/host}/x", "must be literal"},
		{"https://api.{/env}.test/x", "must be literal"},
		{"https://h:{/port}/x", "must be literal"},
		{"http{/s}://h/x", "absolute http or https"},
		{"https://user:pw@h/x", "user info"},
		{"https://h:70000/x", "port out of range"},
		{"https://h/x?{/k}=v", "not in a query key"},
		{"https://h/x/{id}", "not a JSON pointer"},
		{"https://h/x/{}", "not a JSON pointer"},
		{"https://h/x/{/a~2}", "not a JSON pointer"},
		{"https://h/x/{/id", "not closed"},
		{"https://h/x/}", "closes no placeholder"},
		{"https://h/x#frag", "fragment"},
		{"https://h/a b", "percent-encoded"},
		{"https://h/a%zz", "two hex digits"},
		{"https://", "with a host"},
	} {
		if _, err := urltpl.Parse(tc.tpl); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error saying %q", tc.tpl, err, tc.err)
		}
	}
}

func TestPointers(t *testing.T) {
	tpl, err := urltpl.Parse("https://h/a/{/order/id}/b/{/line}?x={/order/id}&y={/z}")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tpl.Pointers(), []string{"/order/id", "/line", "/z"}; !slices.Equal(got, want) {
		t.Fatalf("Pointers() = %v, want %v", got, want)
	}
	if tpl.Base() != "https://h" || tpl.String() != "https://h/a/{/order/id}/b/{/line}?x={/order/id}&y={/z}" {
		t.Fatalf("Base %q String %q", tpl.Base(), tpl.String())
	}
}

func TestShown(t *testing.T) {
	for in, want := range map[string]string{
		"https://h/a/{/id}":                         "https://h/a/{/id}",
		"https://h:8/a?token=abc123&q={/q}&x=a{/y}": "https://h:8/a?token=…&q={/q}&x=…",
		"https://h?flag&empty=":                     "https://h?flag&empty=",
		"http://[::1]:9/o/{/a~1b}?k={/k}":           "http://[::1]:9/o/{/a~1b}?k={/k}",
	} {
		tpl, err := urltpl.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := tpl.Shown(); got != want {
			t.Errorf("Shown(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestEscape(t *testing.T) {
	if got := urltpl.Escape("a/b c"); got != "a%2Fb%20c" {
		t.Fatalf("Escape(a/b c) = %q, want a%%2Fb%%20c", got)
	}
	if got := urltpl.Escape("AZaz09-._~+%"); got != "AZaz09-._~%2B%25" {
		t.Fatalf("Escape = %q", got)
	}
}

// FuzzExpand: whatever the input, an expanded URL keeps the template's
// host, and each placeholder stays one segment or one value.
func FuzzExpand(f *testing.F) {
	f.Add("a/b c")
	f.Add("../../admin?x=1#f")
	f.Add("@evil.test")
	tpl, err := urltpl.Parse("https://api.test/o/{/v}?q={/v}")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := tpl.Expand(map[string]any{"v": v})
		if err != nil {
			return
		}
		rest, ok := strings.CutPrefix(got, "https://api.test/o/")
		if !ok || strings.Count(rest, "/") != 0 || strings.Count(rest, "?") != 1 || strings.Contains(rest, "#") ||
			strings.Count(rest, "&") != 0 || strings.Count(rest, "=") != 1 {
			t.Fatalf("Expand(%q) = %q: the value escaped its segment or value", v, got)
		}
	})
}
