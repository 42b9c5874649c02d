package summary

import (
	"fmt"

	"github.com/touba/touba-trigger/manifest"
)

// limitText is the max_concurrency in force for b, as check prints it
// after the binding's kind: for a webhook or http binding always (its
// default, or "off" when the manifest wrote 0), for another kind only when
// set.
func limitText(b *manifest.Binding) string {
	remote := manifest.ProtectsRemote(b.Handler.Kind)
	switch {
	case remote && b.MaxConcurrency == 0:
		return "  max_concurrency=off"
	case remote && b.MaxConcurrency == manifest.DefaultMaxConcurrency(b.Handler.Kind):
		return fmt.Sprintf("  max_concurrency=%d (default)", b.MaxConcurrency)
	case b.MaxConcurrency > 0:
		return fmt.Sprintf("  max_concurrency=%d", b.MaxConcurrency)
	}
	return ""
}

// circuitSummary is the line check prints of b's circuit in force: for a
// webhook or http binding always, for another kind only when it has one.
func circuitSummary(b *manifest.Binding) []string {
	c := b.Circuit
	if c == nil {
		if manifest.ProtectsRemote(b.Handler.Kind) {
			return []string{"circuit: off"}
		}
		return nil
	}
	line := fmt.Sprintf("circuit: opens when %g of at least %d calls ended in %d ms failed, for %d ms; then one call probes",
		c.FailureRatio, c.MinCalls, c.WindowMS, c.OpenMS)
	if manifest.ProtectsRemote(b.Handler.Kind) && *c == manifest.DefaultRemoteCircuit {
		line += " (default)"
	}
	return []string{line}
}
