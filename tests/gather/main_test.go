// Package gather_test runs debounce and batch (SPEC §2.1, issue 36)
// through the real touba-trigger binary over real HTTP, on real SQLite
// files, with a webhook remote in the test process as the system the runs
// write to: a storm of one key gathered into one run that sees every
// delivery in order, a storm that never pauses bounded by max_wait_ms,
// batches of 10, 10 and 5, the identity of a merged delivery (200
// consumed, 409 on another body), and a SIGKILL at each crash point of a
// gathering; on PostgreSQL, two nodes gathering one key and a node killed
// with an open gathering. Everything asserted is read from outside: what
// the remote received, intake's answers, `queue ls` and `queue show
// --json`.
package gather_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestMain removes the daemon binary testkit builds, and stops the
// PostgreSQL cluster of the PostgreSQL tests, once the tests end.
func TestMain(m *testing.M) { gobuild.Main(pgtest.M(m), nil) }
