package manifest_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/manifest"
)

// A webhook or http binding that sets neither max_concurrency nor circuit
// gets the defaults that protect its remote (SPEC §2.2, issue 44); "0" and
// null turn each off; other kinds get no circuit and keep refusing 0; and
// an encoded manifest loads back with the same values, off included.
func TestRemoteDefaults(t *testing.T) {
	const httpHandler = `{"kind":"http","options":{"url":"https://orders.test/orders/{/id}"}}`
	def := manifest.DefaultRemoteCircuit
	for _, tt := range []struct {
		name, binding string
		maxConc       int
		circuit       *manifest.Circuit
	}{
		{"http, none set", `{"handler":` + httpHandler + `,` + none + `}`, 16, &def},
		{"webhook, none set", `{"handler":` + hook + `,` + none + `}`, 16, &def},
		{"http, both off", `{"handler":` + httpHandler + `,"max_concurrency":0,"circuit":null,` + none + `}`, 0, nil},
		{"webhook, concurrency off", `{"handler":` + hook + `,"max_concurrency":0,` + none + `}`, 0, &def},
		{"webhook, circuit off", `{"handler":` + hook + `,"circuit":null,` + none + `}`, 16, nil},
		{"http, own values", `{"handler":` + httpHandler + `,"max_concurrency":3,` +
			`"circuit":{"failure_ratio":0.25,"min_calls":4,"window_ms":1000,"open_ms":2000},` + none + `}`,
			3, &manifest.Circuit{FailureRatio: 0.25, MinCalls: 4, WindowMS: 1000, OpenMS: 2000}},
		{"process, none set", `{"handler":` + proc + `,` + none + `}`, 0, nil},
		{"process, circuit null", `{"handler":` + proc + `,"circuit":null,` + none + `}`, 0, nil},
		{"accounting_stub, none set", `{"handler":{"kind":"accounting_stub"},` + none + `}`, 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := manifest.Parse("m.json", []byte(one(tt.binding)))
			if err != nil {
				t.Fatal(err)
			}
			b := m.Bindings["tool:a/B"]
			if got, want := b.MaxConcurrency, tt.maxConc; got != want {
				t.Errorf("max_concurrency=%d, want %d", got, want)
			}
			if got, want := b.Circuit, tt.circuit; !reflect.DeepEqual(got, want) {
				t.Errorf("circuit=%+v, want %+v", got, want)
			}
			again, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			m2, err := manifest.Parse("m.json", again)
			if err != nil {
				t.Fatalf("%s: %v", again, err)
			}
			if !reflect.DeepEqual(m, m2) {
				t.Fatalf("round trip changed the binding:\n%s\n%+v\n%+v", again, b, m2.Bindings["tool:a/B"])
			}
		})
	}
	// 0 turns off only a default; a process binding has none to turn off.
	_, err := manifest.Parse("m.json", []byte(one(`{"handler":`+proc+`,"max_concurrency":0,`+none+`}`)))
	if want := `$.bindings["tool:a/B"].max_concurrency: must be a positive integer (got 0)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("process max_concurrency 0: %v, want %s", err, want)
	}
}
