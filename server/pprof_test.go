package server

import (
	"testing"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
)

// TOUBA_PPROF serves profiles on loopback only: any other address is a
// usage refusal, so a profile (stacks, memory) never reaches the network.
func TestPprofLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.1.2.3:6060", "example.com:6060", "nonsense"} {
		t.Setenv(EnvPprof, addr)
		if stop, err := StartPprof(zerolog.Nop()); touba.ErrorCode(err) != touba.EUsage {
			if err == nil {
				stop()
			}
			t.Errorf("%s=%q: %v, want %s", EnvPprof, addr, err, touba.EUsage)
		}
	}
	t.Setenv(EnvPprof, "")
	stop, err := StartPprof(zerolog.Nop())
	if err != nil {
		t.Fatalf("unset: %v", err)
	}
	stop()
	t.Setenv(EnvPprof, "127.0.0.1:0")
	if stop, err = StartPprof(zerolog.Nop()); err != nil {
		t.Fatalf("loopback: %v", err)
	}
	stop()
}
