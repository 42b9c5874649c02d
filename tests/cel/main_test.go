// Package cel_test drives the real touba-trigger binary on SQLite with the
// CEL expressions of SPEC §2.4: a filter that takes or filters deliveries,
// a key computed at intake, a step input computed by an expression and
// journaled with it, a step skipped by its when, and an expression that
// fails at run time in each of the four places, answered as §2.4 says.
package cel_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
)

// TestMain removes the daemon binary testkit builds once the tests end.
func TestMain(m *testing.M) { gobuild.Main(m, nil) }
