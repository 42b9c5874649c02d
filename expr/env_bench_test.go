package expr_test

import (
	"testing"

	"github.com/touba/touba-trigger/expr"
)

// BenchmarkNewEnv is what a load pays for its expressions' environment.
func BenchmarkNewEnv(b *testing.B) {
	for b.Loop() {
		if _, err := expr.NewEnv(0); err != nil {
			b.Fatal(err)
		}
	}
}
