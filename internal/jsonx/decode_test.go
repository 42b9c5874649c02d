package jsonx

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var decodeCases = append([]string{
	`{"type":"t3","data":"xx"}`, `{"a":{"b":[1,-2.5e+3,"c",true,false,null,{}]}}`, `{"a":1,"a":{"b":2}}`,
	`"caf` + "\u00e9" + `"`, "\"\xe9t\xe9\"", `"a\u00e9\nb\/c\"d"`, `"\ud83d\ude00"`, `"\ud800x"`, `{"\u0061":1}`,
	"{\"\xff\":1}", `  [1, 2]  `, `[1,2] x`, `123`, `123 `, `1.0`, `-0`, `1E400`, `123456789012345678901234567890`,
	"\"a\u2028b\"", `{"a":1}{}`, `[[],{},""]`, `"\ud800\u0041"`, `"\udc00"`, `"\ud800\ud800"`, `"\ud800"`, `"\u0000\b\f\r\t"`,
	"\"\xff\\n\xc3\"", `"\uD83D\uDE00!"`, "\"\\\\\xe9\"",
}, cases...)

// decoder is what Decode stands in for.
func decoder(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func agrees(t *testing.T, b []byte) {
	got, ok := Decode(b)
	if !ok {
		return // the caller asks encoding/json
	}
	want, err := decoder(b)
	if err != nil {
		t.Fatalf("Decode(%.60q) = %v, encoding/json refuses it: %v", b, got, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%.60q) = %#v, encoding/json gives %#v", b, got, want)
	}
}

func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range decodeCases {
		agrees(t, []byte(c))
	}
	// What intake reads: Decode answers for it, without encoding/json.
	for _, c := range []string{`{"s":"a\nb \u00e9 \ud83d\ude00"}`, `{"type":"t3","data":"` + strings.Repeat("x", 1000) + `"}`, `{"a":"\u00e9","b":[1.5,null]}`, `"caf` + "\u00e9" + `"`} {
		if _, ok := Decode([]byte(c)); !ok {
			t.Errorf("Decode(%.40q) leaves a plain document to encoding/json", c)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { agrees(t, b) })
}

var routedBody = []byte(`{"type":"t3","data":"` + strings.Repeat("x", 1000) + `"}`)

func BenchmarkDecode(b *testing.B) {
	b.Run("jsonx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Decode(routedBody)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decoder(routedBody)
		}
	})
}
