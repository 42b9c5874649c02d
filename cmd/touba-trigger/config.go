package main

import (
	"fmt"
	"os"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/trigger"
)

// config is a program and a manifest checked against each other, with
// every secret resolved: what serve runs and what check validates.
type config struct {
	program  *trigger.Program
	manifest *manifest.Manifest
	resolved *manifest.Resolved
	intake   *trigger.Config
	secrets  *secret.Set
}

// loadConfig loads both files strictly and refuses, before anything runs,
// a step naming an unbound tool, a binding no step uses, and any secret
// that cannot be resolved.
func loadConfig(programPath, manifestPath string) (*config, error) {
	if programPath == "" {
		return nil, usageError{err: fmt.Errorf("a PROGRAM file is required")}
	}
	if manifestPath == "" {
		return nil, usageError{err: fmt.Errorf("--manifest is required")}
	}
	p, err := trigger.LoadProgram(programPath)
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
	return &config{program: p, manifest: m, resolved: res, intake: ic, secrets: res.Values}, nil
}

// configErr makes sure a load failure exits 2 even when it carries no code.
func configErr(err error) error {
	if touba.ErrorCode(err) == touba.ECONFIG {
		return err
	}
	return usageError{err: err}
}
