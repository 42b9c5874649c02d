package strictjson_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/strictjson"
)

func TestPathSyntax(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{strictjson.Child("$", "bindings"), "$.bindings"},
		{strictjson.Child("$.bindings", "tool:a/B"), `$.bindings["tool:a/B"]`},
		{strictjson.Child("$.x", "$ref"), `$.x["$ref"]`},
		{strictjson.Child("$", "a<b"), `$["a<b"]`},
		{strictjson.Index("$.triggers", 3), "$.triggers[3]"},
	} {
		if tt.got != tt.want {
			t.Errorf("path %s, want %s", tt.got, tt.want)
		}
	}
}

// decode reads src and returns the tree and the refusals as one string.
func decode(src string) (*strictjson.Node, string) {
	r := &strictjson.Reader{File: "f.json"}
	n := r.Decode([]byte(src))
	if err := r.Err(); err != nil {
		return n, err.Error()
	}
	return n, ""
}

func TestDecode_Refusals(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{`{"a":{"b":1,"b":2}}`, `f.json: $.a.b: duplicate key`},
		{`{"k:x":[0,{"$ref":1,"$ref":2}]}`, `f.json: $["k:x"][1]["$ref"]: duplicate key`},
		{`{} {}`, `f.json: $: trailing data after the JSON document (at line 1, column 4 (byte 3))`},
		{`{"a":[1,]}`, `f.json: $.a[1]: invalid JSON at line 1, column 9 (byte 8): invalid character ']' looking for beginning of value`},
		{strings.Repeat("[", strictjson.MaxDepth+2), fmt.Sprintf("f.json: $%s: nesting deeper than %d levels", strings.Repeat("[0]", strictjson.MaxDepth+1), strictjson.MaxDepth)},
	} {
		if n, got := decode(tt.src); got != tt.want || n != nil {
			t.Errorf("%s: tree %v, refusal %q, want %q", tt.src, n, got, tt.want)
		}
	}
}

// Raw holds each value's bytes as written, so a program's step input or a
// filter value is kept exactly.
func TestDecode_Raw(t *testing.T) {
	n, errs := decode(` { "a" : [ 1.50 , {"x": "y"} ], "b":null } `)
	if errs != "" {
		t.Fatal(errs)
	}
	a := n.Vals[0]
	for _, tt := range []struct{ got, want string }{
		{string(n.Raw), `{ "a" : [ 1.50 , {"x": "y"} ], "b":null }`},
		{string(a.Raw), `[ 1.50 , {"x": "y"} ]`},
		{string(a.Items[0].Raw), `1.50`},
		{a.Items[0].Text, `1.50`},
		{string(a.Items[1].Raw), `{"x": "y"}`},
		{string(n.Vals[1].Raw), `null`},
	} {
		if tt.got != tt.want {
			t.Errorf("raw %q, want %q", tt.got, tt.want)
		}
	}
}

func TestReader_Checks(t *testing.T) {
	n, errs := decode(`{"n":"1024","f":1.5,"big":99999999999999999999,"z":0,"s":7,"l":["a",1,null],"x":null,"o":{"q":1}}`)
	if errs != "" {
		t.Fatal(errs)
	}
	r := &strictjson.Reader{File: "f.json"}
	f, err := r.Object("$", n, []string{"n", "f", "big", "z", "s", "l", "x"}, "n", "m")
	if f == nil || err == nil || err.Error() != `f.json: $.o: unknown field (known: big, f, l, n, s, x, z)` {
		t.Fatalf("Object: %v %v", f, err)
	}
	r.Integer("$.n", f["n"], 10)
	r.Integer("$.f", f["f"], 10)
	r.Integer("$.big", f["big"], 10)
	r.Integer("$.z", f["z"], 10)
	r.Str("$.s", f["s"])
	r.Strs("$.l", f["l"])
	r.Boolean("$.x", f["x"])
	want := strings.Join([]string{
		`f.json: $.o: unknown field (known: big, f, l, n, s, x, z)`,
		`f.json: $.m: required field is missing`,
		`f.json: $.n: must be a positive integer (got string)`, // a quoted number is a string
		`f.json: $.f: must be a positive integer (got 1.5)`,
		`f.json: $.big: must be at most 10 (got 99999999999999999999)`,
		`f.json: $.z: must be a positive integer (got 0)`,
		`f.json: $.s: must be a string (got number)`,
		`f.json: $.l[1]: must be a string (got number)`,
		`f.json: $.l[2]: must not be null`,
		`f.json: $.x: must not be null`,
	}, "\n")
	if got := r.Err(); got == nil || got.Error() != want {
		t.Fatalf("refusals:\n%v\nwant:\n%s", got, want)
	}
	var ce *touba.ConfigError
	if !errors.As(r.Err(), &ce) || ce.Path != "$.o" || touba.ErrorCode(r.Err()) != touba.ECONFIG {
		t.Fatalf("first refusal %+v, code %s", ce, touba.ErrorCode(r.Err()))
	}
}

// A hostile file gets a bounded list, not megabytes of text.
func TestReader_BoundsRefusals(t *testing.T) {
	r := &strictjson.Reader{File: "f.json"}
	for i := range strictjson.MaxErrors + 10 {
		r.Fail(strictjson.Index("$", i), "bad")
	}
	if got := strings.Count(r.Err().Error(), "\n") + 1; got != strictjson.MaxErrors {
		t.Fatalf("%d refusals, want %d", got, strictjson.MaxErrors)
	}
}
