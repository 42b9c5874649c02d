package senders_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
)

// TestMain removes the daemon binary testkit builds once the tests end.
func TestMain(m *testing.M) { gobuild.Main(m, nil) }
