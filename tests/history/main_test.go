// Package history_test runs the real touba-trigger binary on PostgreSQL
// with --history (SPEC §8.1) and checks from outside what a pass must
// never do and what it must do: two nodes passing at once, and a peer
// that takes the maintenance advisory lock at random moments, never lose a
// failed, parked or paused-pending entry that intake acknowledged, never
// leave a detached partition behind, and still forget the done entries
// past the window; and partitions at the 10 s floor under a steady load
// stay few, with intake never answering 503.
//
// TOUBA_HISTORY_BIN runs the nodes (and the CLI) from another build of
// touba-trigger, to see a test fail on a build before a fix.
package history_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestMain removes the daemon binary testkit builds, and stops the
// throwaway PostgreSQL cluster, once the tests end.
func TestMain(m *testing.M) { gobuild.Main(pgtest.M(m), nil) }
