package trigger

import (
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// ConfigError is a refusal of the program file; the manifest loader
// refuses with the same type.
type ConfigError = touba.ConfigError

// walker checks a program with the shared strict loader. The program's
// checks build on each other (a step's references need the earlier steps'
// ids, a scheme's fields need the scheme), so a load stops at the first
// value it cannot go on from and reports the refusals recorded until then.
type walker struct {
	*strictjson.Reader
	// exprs compiles the program's expressions (expressions.go).
	exprs *exprState
}

func newWalker(file string) walker {
	return walker{Reader: &strictjson.Reader{File: file}, exprs: &exprState{}}
}
