package manifest_test

import (
	"strings"
	"testing"

	"github.com/touba/touba-trigger/manifest"
)

// A binding's circuit (SPEC §2.2) is read exactly, and every bad field is
// refused at load naming its path.
func TestCircuit(t *testing.T) {
	const B = `m.json: $.bindings["tool:a/B"].circuit`
	with := func(circuit string) string {
		return one(`{"handler":` + proc + `,"circuit":` + circuit + `,` + none + `}`)
	}
	m, err := manifest.Parse("m.json", []byte(with(`{"failure_ratio": 0.5, "min_calls": 20, "window_ms": 60000, "open_ms": 30000}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *m.Bindings["tool:a/B"].Circuit, (manifest.Circuit{FailureRatio: 0.5, MinCalls: 20, WindowMS: 60000, OpenMS: 30000}); got != want {
		t.Fatalf("circuit %+v, want %+v", got, want)
	}
	m, err = manifest.Parse("m.json", []byte(with(`{"failure_ratio": 1, "min_calls": 1, "window_ms": 1, "open_ms": 86400000}`)))
	if err != nil || m.Bindings["tool:a/B"].Circuit.FailureRatio != 1 {
		t.Fatalf("failure_ratio 1: %v %+v", err, m)
	}
	for _, tt := range []struct{ name, circuit, want string }{
		{"unknown field", `{"failure_ratio": 0.5, "min_calls": 20, "window_ms": 60000, "open_ms": 30000, "half_open": 1}`,
			B + `.half_open: unknown field (known: failure_ratio, min_calls, open_ms, window_ms)`},
		{"missing open_ms", `{"failure_ratio": 0.5, "min_calls": 20, "window_ms": 60000}`, B + `.open_ms: required field is missing`},
		{"not an object", `true`, B + `: must be an object (got boolean)`},
		{"ratio zero", `{"failure_ratio": 0, "min_calls": 20, "window_ms": 60000, "open_ms": 30000}`, B + `.failure_ratio: must be a number in (0, 1] (got 0)`},
		{"ratio above one", `{"failure_ratio": 1.5, "min_calls": 20, "window_ms": 60000, "open_ms": 30000}`, B + `.failure_ratio: must be a number in (0, 1] (got 1.5)`},
		{"ratio string", `{"failure_ratio": "50%", "min_calls": 20, "window_ms": 60000, "open_ms": 30000}`, B + `.failure_ratio: must be a number in (0, 1] (got string)`},
		{"zero min_calls", `{"failure_ratio": 0.5, "min_calls": 0, "window_ms": 60000, "open_ms": 30000}`, B + `.min_calls: must be a positive integer (got 0)`},
		{"fractional window", `{"failure_ratio": 0.5, "min_calls": 20, "window_ms": 1.5, "open_ms": 30000}`, B + `.window_ms: must be a positive integer (got 1.5)`},
		{"huge open_ms", `{"failure_ratio": 0.5, "min_calls": 20, "window_ms": 60000, "open_ms": 86400001}`, B + `.open_ms: must be at most 86400000 (got 86400001)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := manifest.Parse("m.json", []byte(with(tt.circuit)))
			if err == nil {
				t.Fatalf("parsed %+v, want error %q", m, tt.want)
			}
			if got := err.Error(); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("error:\n %s\nwant:\n %s", got, tt.want)
			}
		})
	}
}
