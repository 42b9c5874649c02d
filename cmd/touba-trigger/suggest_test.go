package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/cli"
)

func run(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	exit := Run(context.Background(), args, &stdout, &stderr)
	return exit, stdout.String(), stderr.String()
}

// TestGroupHelp: `queue -h` is help, not an unknown verb.
func TestGroupHelp(t *testing.T) {
	for _, group := range []string{"queue", "deliveries", "effects", "journal"} {
		for _, h := range []string{"-h", "--help", "help"} {
			exit, stdout, stderr := run(group, h)
			if exit != cli.ExitOK || stderr != "" || !strings.Contains(stdout, "touba-trigger "+group+" ") {
				t.Fatalf("%s %s: exit %d, stdout %q, stderr %q", group, h, exit, stdout, stderr)
			}
		}
	}
}

// TestDidYouMean: a mistyped verb or flag is refused with the near one.
func TestDidYouMean(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "lss"}, `(did you mean "ls"?)`},
		{[]string{"queue", "replya"}, `(did you mean "replay"?)`},
		{[]string{"queue", "ls", "--limt", "3"}, "(did you mean --limit?)"},
		{[]string{"deliveries", "ls", "--rejeted"}, "(did you mean --rejected?)"},
		{[]string{"check", "--manifets", "x"}, "(did you mean --manifest?)"},
	} {
		exit, _, stderr := run(c.args...)
		line, _, _ := strings.Cut(stderr, "\n")
		if exit != cli.ExitUsage || !strings.HasPrefix(line, "UsageInvalid: ") || !strings.HasSuffix(line, c.want) {
			t.Errorf("%v: exit %d, first line %q, want it to end %q", c.args, exit, line, c.want)
		}
	}
	// Nothing near: no guess.
	if _, _, stderr := run("queue", "ls", "--zzzzzz"); strings.Contains(stderr, "did you mean") {
		t.Errorf("a guess for a flag nothing like any: %q", stderr)
	}
}

// TestMissingProgramSaysItOnce: the refusal of a missing program file
// names the file once, not the message twice.
func TestMissingProgramSaysItOnce(t *testing.T) {
	for _, cmd := range []string{"check"} {
		exit, _, stderr := run(cmd, "/nonexistent/program.air.json", "--manifest", "/nonexistent/m.json")
		if exit != cli.ExitUsage || strings.Count(stderr, "no such file or directory") != 1 ||
			!strings.HasPrefix(stderr, "ConfigInvalid: ") {
			t.Errorf("%s: exit %d, stderr %q", cmd, exit, stderr)
		}
	}
}
