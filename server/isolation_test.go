package server

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/manifest"
)

// The decision table of SPEC §2.2 for process bindings without the
// network grant: isolated, refused, or allowed with a warning that names
// them.
func TestCheckIsolation(t *testing.T) {
	m := &manifest.Manifest{Bindings: map[string]*manifest.Binding{
		"tool:t/Closed": {Handler: manifest.Handler{Kind: manifest.KindProcess}, Grants: []string{}},
		"tool:t/Open":   {Handler: manifest.Handler{Kind: manifest.KindProcess}, Grants: []string{manifest.GrantNetwork}},
		"tool:t/Hook":   {Handler: manifest.Handler{Kind: manifest.KindWebhook}, Grants: []string{}},
	}}
	none := &manifest.Manifest{Bindings: map[string]*manifest.Binding{"tool:t/Open": m.Bindings["tool:t/Open"]}}
	available := func() (string, error) { return "network namespace (root)", nil }
	unavailable := func() (string, error) { return "", errors.New("operation not permitted") }
	for _, tt := range []struct {
		name     string
		m        *manifest.Manifest
		probe    func() (string, error)
		allow    bool
		code     string // of the refusal, "" for none
		warnings int
	}{
		{"isolated", m, available, false, "", 0},
		{"nothing to isolate", none, unavailable, false, "", 0},
		{"refused", m, unavailable, false, touba.ENetworkIsolationUnavailable, 0},
		{"allowed", m, unavailable, true, "", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			old := isolationProbe
			isolationProbe = tt.probe
			t.Cleanup(func() { isolationProbe = old })
			var logs bytes.Buffer
			err := checkIsolation(tt.m, tt.allow, zerolog.New(&logs))
			if got := touba.ErrorCode(err); (err == nil) != (tt.code == "") || (err != nil && got != tt.code) {
				t.Fatalf("err = %v (code %q), want code %q", err, got, tt.code)
			}
			if err != nil && (!strings.Contains(err.Error(), "tool:t/Closed") || strings.Contains(err.Error(), "tool:t/Open") ||
				strings.Contains(err.Error(), "tool:t/Hook")) {
				t.Fatalf("refusal %q does not name exactly tool:t/Closed", err)
			}
			if got := strings.Count(logs.String(), `"level":"warn"`); got != tt.warnings {
				t.Fatalf("%d warnings, want %d: %s", got, tt.warnings, logs.String())
			}
			if tt.warnings > 0 && !strings.Contains(logs.String(), `"bindings":["tool:t/Closed"]`) {
				t.Fatalf("the warning does not name the binding: %s", logs.String())
			}
		})
	}
}
