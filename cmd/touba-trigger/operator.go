package main

import (
	"flag"
	"io"

	"github.com/touba/touba-trigger/cli"
)

// operatorVerb starts an operator command: which verb of group it is, and
// its flag set holding the shared flags (cli.Operator).
func operatorVerb(group string, args []string, stderr io.Writer, stateFileFlag bool, verbs ...string) (string, []string, *flag.FlagSet, *cli.Operator, error) {
	verb, args, err := usage.Verb(group, args, verbs...)
	if err != nil {
		return "", nil, nil, nil, err
	}
	f := &cli.Operator{}
	fs := usage.FlagSet(group+" "+verb, stderr)
	f.Define(fs, stateFileFlag)
	return verb, args, fs, f, nil
}
