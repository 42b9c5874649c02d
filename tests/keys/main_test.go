// Package keys_test drives the real touba-trigger binary, on SQLite and on
// one PostgreSQL node, with deliveries whose keys are over the limit
// (issue 43): a debounce key and a concurrency key of 6,000 random letters
// (which TOAST cannot compress into a btree row on PostgreSQL), sent in the
// middle of a flood to another trigger. Each oversized delivery is refused
// alone, 422 KeyTooLong; every other delivery is accepted, 202.
package keys_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestMain removes the daemon binary testkit builds, and stops the
// throwaway PostgreSQL cluster if a test started it, once the tests end.
func TestMain(m *testing.M) { gobuild.Main(pgtest.M(m), nil) }
