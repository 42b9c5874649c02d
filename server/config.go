package server

import (
	"os"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/trigger"
)

// Loaded is a program and a manifest checked against each other, with
// every secret resolved: what serve runs and what check validates.
type Loaded struct {
	Program  *trigger.Program
	Manifest *manifest.Manifest
	Resolved *manifest.Resolved
	Intake   *trigger.Config
	Secrets  *secret.Set
}

// LoadConfig loads both files strictly and refuses, before anything runs,
// a step naming an unbound tool, a binding no step uses, and any secret
// that cannot be resolved.
//
// costLimit is --expression-cost-limit (0: the default): the program's
// expressions are compiled under it (SPEC §2.4).
func LoadConfig(programPath, manifestPath string, costLimit uint64) (*Loaded, error) {
	if programPath == "" {
		return nil, touba.Errorf(touba.EUsage, "a PROGRAM file is required")
	}
	if manifestPath == "" {
		return nil, touba.Errorf(touba.EUsage, "--manifest is required")
	}
	p, err := trigger.LoadProgramWith(programPath, trigger.LoadOptions{ExpressionCostLimit: costLimit})
	if err != nil {
		return nil, configErr(err)
	}
	m, err := manifest.Load(manifestPath)
	if err != nil {
		return nil, configErr(err)
	}
	if err := p.CheckTools(func(ref string) bool { return m.Bindings[ref] != nil }); err != nil {
		return nil, configErr(err)
	}
	if err := m.CheckUsage(p.ToolRefs()); err != nil {
		return nil, configErr(err)
	}
	res, err := m.Resolve(os.LookupEnv)
	if err != nil {
		return nil, configErr(err)
	}
	ic, err := trigger.NewConfig(p, os.LookupEnv, res.Values)
	if err != nil {
		return nil, configErr(err)
	}
	return &Loaded{Program: p, Manifest: m, Resolved: res, Intake: ic, Secrets: res.Values}, nil
}

// configErr makes sure a load failure is refused as bad configuration
// (exit 2) even when it carries no code.
func configErr(err error) error {
	if c := touba.ErrorCode(err); c == touba.ECONFIG || c == touba.EProgramInvalid {
		return err
	}
	return configWrapped{code: &touba.Error{Code: touba.ECONFIG, Message: err.Error()}, err: err}
}

// configWrapped gives err the code ConfigInvalid and still unwraps to it
// (errors.Is(err, fs.ErrNotExist) holds), reading as err alone: a message
// made of the code's text and err's would say everything twice.
type configWrapped struct {
	code *touba.Error
	err  error
}

func (e configWrapped) Error() string   { return e.err.Error() }
func (e configWrapped) Unwrap() []error { return []error{e.code, e.err} }
