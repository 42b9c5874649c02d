package jsonptr_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/jsonptr"
)

// The document and pointers of RFC 6901 §5.
const rfcDoc = `{"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4, "i\\j": 5, "k\"l": 6, " ": 7, "m~n": 8}`

func decode(t testing.TB, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRFC6901Examples(t *testing.T) {
	doc := decode(t, rfcDoc)
	for ptr, want := range map[string]string{
		"/foo": `["bar","baz"]`, "/foo/0": `"bar"`, "/": `0`, "/a~1b": `1`, "/c%d": `2`, "/e^f": `3`,
		"/g|h": `4`, "/i\\j": `5`, "/k\"l": `6`, "/ ": `7`, "/m~0n": `8`,
	} {
		v, err := jsonptr.Get(doc, ptr)
		if err != nil {
			t.Fatalf("Get(%q): %v", ptr, err)
		}
		b, _ := json.Marshal(v)
		if got := string(b); got != want {
			t.Errorf("Get(%q)=%s, want %s", ptr, got, want)
		}
	}
	if v, err := jsonptr.Get(doc, ""); err != nil || !reflect.DeepEqual(v, doc) {
		t.Fatalf("Get(\"\") = %v, %v; want whole document", v, err)
	}
}

func TestNotFoundAndInvalid(t *testing.T) {
	doc := decode(t, `{"a": [1, 2], "s": "x"}`)
	for _, ptr := range []string{"/b", "/a/2", "/a/01", "/a/-", "/a/x", "/s/0", "/a/0/z"} {
		if _, err := jsonptr.Get(doc, ptr); !errors.Is(err, jsonptr.ErrNotFound) {
			t.Errorf("Get(%q) err=%v, want ErrNotFound", ptr, err)
		}
	}
	for _, ptr := range []string{"a", "/~2", "/x~"} {
		if _, err := jsonptr.Parse(ptr); err == nil {
			t.Errorf("Parse(%q) accepted", ptr)
		}
	}
}

func FuzzGet(f *testing.F) {
	f.Add(rfcDoc, "/foo/1")
	f.Add(`{"id": "evt_1"}`, "/id")
	f.Add(`[1,[2,[3]]]`, "/1/1/0")
	f.Fuzz(func(t *testing.T, doc, ptr string) {
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		got, err := jsonptr.Get(v, ptr)
		if err != nil {
			return
		}
		// Walking the parsed tokens by hand must reach the same value.
		toks, perr := jsonptr.Parse(ptr)
		if perr != nil {
			t.Fatalf("Get succeeded but Parse(%q) failed: %v", ptr, perr)
		}
		cur := v
		for _, tok := range toks {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[tok]
			case []any:
				var i int
				if err := json.Unmarshal([]byte(tok), &i); err != nil || i < 0 || i >= len(c) {
					t.Fatalf("token %q on array accepted by Get", tok)
				}
				cur = c[i]
			default:
				t.Fatalf("Get descended into a scalar")
			}
		}
		if !reflect.DeepEqual(cur, got) {
			t.Fatalf("Get(%q)=%v, manual walk %v", ptr, got, cur)
		}
	})
}
