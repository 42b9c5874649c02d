// Package fairness_test drives the real touba-trigger binary, on SQLite and
// on one PostgreSQL node, and checks from outside the promises of fair
// dispatch (SPEC §2.1 `dispatch`, §2.2 "Holds take nothing"): one
// trigger's backlog, however large, and any number of its runs held back
// by a binding's max_concurrency or open circuit, never delay another
// trigger's runnable entry by more than its share of the workers; and the
// workers are shared among backlogged triggers in proportion to their
// weights.
//
// The webhook remote is an httptest server in the test process, reached
// over loopback; the entries' states are read from the queue file (SQLite)
// or the database (PostgreSQL) the daemon writes.
package fairness_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestMain removes the daemon binary testkit builds, and stops the
// throwaway PostgreSQL cluster if a test started it, once the tests end.
func TestMain(m *testing.M) { gobuild.Main(pgtest.M(m), nil) }
