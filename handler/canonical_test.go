package handler_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/handler"
)

func TestCanonical(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{"key order", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
		{"whitespace", " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\":{ } } ", `{"a":[1,2],"b":{}}`},
		{"nested", `{"z":{"y":[{"b":1,"a":0}],"x":null},"a":true}`, `{"a":true,"z":{"x":null,"y":[{"a":0,"b":1}]}}`},
		{"empty", `{}`, `{}`},
		{"empty array", `[ ]`, `[]`},
		{"scalar", ` "x" `, `"x"`},
		{"1.0 kept", `1.0`, `1.0`},
		{"1e3 kept", `[1e3,1E+3,2e-1]`, `[1e3,1E+3,2e-1]`},
		{"-0 kept", `-0`, `-0`},
		{"big int kept", `12345678901234567890`, `12345678901234567890`},
		{"precise decimal kept", `0.10000000000000000000001`, `0.10000000000000000000001`},
		{"unicode raw", `"\u00e9\u4e2d"`, `"é中"`},
		{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
		{"utf8 raw", `"😀 é"`, `"😀 é"`},
		{"slash unescaped", `"a\/b"`, `"a/b"`},
		{"html not escaped", `"<&>"`, `"<&>"`},
		{"u2028 raw", `"\u2028"`, "\"\u2028\""},
		{"short escapes", `"\"\\\b\f\n\r\t"`, `"\"\\\b\f\n\r\t"`},
		{"control as \\u", `"\u0001\u001F"`, `"\u0001\u001f"`},
		{"del raw", `"\u007f"`, "\"\x7f\""},
		{"keys sorted by bytes", `{"é":1,"z":2,"Z":3,"😀":4,"":5}`, `{"":5,"Z":3,"z":2,"é":1,"😀":4}`},
		{"escaped key sorted decoded", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := handler.Canonical([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonical(%s): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonical(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestCanonicalRefuses(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `.5`, `1e`, `+1`, `-`,
		`NaN`, `tru`, `nul`, `"abc`, `"\x"`, `"\u12"`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`,
		"\"\x01\"", "\"\xff\"", "\"\xed\xa0\x80\"", `{"a":1,"a":2}`, `{"b":1,"a":2,"b":3}`,
		`1 2`, `{} x`, strings.Repeat("[", 1002) + strings.Repeat("]", 1002),
	} {
		if got, err := handler.Canonical([]byte(in)); err == nil {
			t.Errorf("Canonical(%q) = %s, want an error", in, got)
		}
	}
}

func TestFingerprint(t *testing.T) {
	// Expected values computed independently with
	//   printf '%s' '<canonical document>' | sha256sum
	for _, tt := range []struct {
		tool, op, input, want string
	}{
		{"tool:examples.orders/CreateOrder", "invoke", "{ \"b\": [true, null, \"\\u00e9\"], \"a\": 1 }",
			"sha256:7c23fc243092ce542d4ae686fd2654eadcf98bc82ed7031306a9a57a2966d0cd"},
		{"tool:x", "invoke", "", "sha256:6ee5299ab388b046e5b344f975eb3c8b4e7f9368d9c4418cc71d61871f0e0a26"},
		{"tool:x", "invoke", "null", "sha256:6ee5299ab388b046e5b344f975eb3c8b4e7f9368d9c4418cc71d61871f0e0a26"},
	} {
		got, err := handler.Fingerprint(tt.tool, tt.op, json.RawMessage(tt.input))
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("Fingerprint(%q, %q, %s) = %s, want %s", tt.tool, tt.op, tt.input, got, tt.want)
		}
	}
	a, _ := handler.Fingerprint("tool:x", "invoke", json.RawMessage(`{"n":1}`))
	for _, other := range [][3]string{{"tool:y", "invoke", `{"n":1}`}, {"tool:x", "compensate", `{"n":1}`}, {"tool:x", "invoke", `{"n":1.0}`}} {
		if b, _ := handler.Fingerprint(other[0], other[1], json.RawMessage(other[2])); b == a {
			t.Errorf("Fingerprint%v equals that of tool:x invoke {\"n\":1}", other)
		}
	}
	if _, err := handler.Fingerprint("tool:x", "invoke", json.RawMessage(`{"a":1,"a":1}`)); err == nil {
		t.Error("Fingerprint accepted an input with a duplicate key")
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1.0,1e3,-0,12345678901234567890]}`, `"\ud83d\ude00\u0000<>"`, `[]`, `{"":{"":""}}`,
		`{"a":1,"a":2}`, "\"\xff\"", `[1,2,{"x":"\u2028"}]`, `-0.0e-0`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := handler.Canonical(in)
		if err != nil {
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		if !json.Valid(c) {
			t.Fatalf("Canonical(%q) = %q, not JSON", in, c)
		}
		c2, err := handler.Canonical(c)
		if err != nil || string(c2) != string(c) {
			t.Fatalf("Canonical is not idempotent: %q -> %q -> %q (%v)", in, c, c2, err)
		}
		if a, b := decode(t, in), decode(t, c); !reflect.DeepEqual(a, b) {
			t.Fatalf("meaning changed: %q -> %q", in, c)
		}
	})
}

// decode reads JSON keeping numbers as written.
func decode(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}
