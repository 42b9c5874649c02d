// Package routes_test drives the real touba-trigger binary with routes
// (SPEC §2.4): one Stripe-like endpoint feeding a flow per event type, on
// SQLite files and on PostgreSQL. A delivery fans out to exactly the
// routes whose filters hold; a duplicate, a conflict and a consumed
// redelivery create nothing; a route's URL is 404; a route is paused,
// weighted, keyed and replayed alone; a reload adds a route (later
// deliveries feed it) and removes one (its unfinished entries park
// ProgramChanged); a SIGKILL inside intake's transaction, or after it and
// before the answer, leaves the accepting entry and its routes' all or
// none. Everything is read from outside: intake's answers, what the remote
// received, and the CLI's --json.
package routes_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestMain removes the daemon binary testkit builds, and stops the
// PostgreSQL cluster of the PostgreSQL tests, once the tests end.
func TestMain(m *testing.M) { gobuild.Main(pgtest.M(m), nil) }
