package manifest

import (
	touba "github.com/touba/touba-trigger"

	"github.com/touba/touba-trigger/internal/strictjson"
)

// ConfigError is one refusal of a manifest; the program loader refuses
// with the same type.
type ConfigError = touba.ConfigError

// problems checks one manifest with the shared strict loader. The manifest
// goes on after a refusal wherever the rest can still be checked, so one
// load reports every refusal (up to strictjson.MaxErrors), in document
// order.
type problems struct{ strictjson.Reader }

func newProblems(file string) *problems { return &problems{strictjson.Reader{File: file}} }
