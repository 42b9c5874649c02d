package jsonx

import (
	"encoding/json"
	"strings"
	"testing"
)

var cases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `true`, `false`, `null`, ` {"a": [1, {"b": null}], "c": "\u00e9\n"} `,
	`{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`, `"\x"`, `"\u12"`, `01`, `1.`, `1e`, `-`, `.5`, `+1`, `[1,]`, `{"a":1,}`,
	`{"a"}`, `{1:2}`, `[1 2]`, `tru`, `nul`, `{"a":1} {}`, ``, ` `, "\"\x01\"", "\"\t\"", `"\/"`, `[[[[]]]]`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range cases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%.40q) = %v, json.Valid says %v", c, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

var body1k = []byte(`{"external_id":"BILL-0193a1b2:post","payload":{"body":{"data":"` + strings.Repeat("x", 1013) + `"}}}`)

func BenchmarkValid(b *testing.B) {
	b.Run("jsonx", func(b *testing.B) {
		b.SetBytes(int64(len(body1k)))
		for b.Loop() {
			Valid(body1k)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(body1k)))
		for b.Loop() {
			json.Valid(body1k)
		}
	})
}
