// Package cli is the machinery touba-trigger's subcommands share, apart
// from what each of them does: flag sets whose help starts with the
// command's synopsis, flags filled from TOUBA_<FLAG>, refusals that start
// with their public code and exit as SPEC §3 says, "did you mean" for a
// mistyped verb or flag, the build's version, and whether a person is at
// the terminal to answer. It lives apart from cmd/touba-trigger so that
// the command package holds only its flags, its wiring and the dispatch
// to subcommands.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Usage is a command's whole usage text: a line per command, "  touba-trigger
// NAME ...", and lines indented six spaces that continue it. The help of
// a flag set (-h, or after a refused flag) and of a group of verbs is cut
// from it, so there is one text to keep up to date.
type Usage string

// FlagSet returns a flag set that reports errors instead of exiting,
// and whose usage (-h, or after a refused flag) starts with the command's
// synopsis lines from u, then its flags.
func (u Usage) FlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintln(out, "usage:")
		for _, line := range u.synopsis(name) {
			fmt.Fprintln(out, line)
		}
		fmt.Fprintln(out, "flags (each also read from TOUBA_<FLAG>):")
		fs.PrintDefaults()
	}
	return fs
}

// synopsis are the lines of the usage for the command name ("serve",
// "queue ls"), with the lines that continue them.
func (u Usage) synopsis(name string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(string(u), "\n") {
		switch {
		case strings.HasPrefix(line, "  touba-trigger "+name+" ") || line == "  touba-trigger "+name:
			in = true
			out = append(out, line)
		case in && strings.HasPrefix(line, "      "):
			out = append(out, line)
		default:
			in = false
		}
	}
	if len(out) == 0 {
		out = append(out, "  touba-trigger "+name+" [flags]")
	}
	return out
}

// Verb splits "queue ls ..." into the verb and its arguments. `queue -h`
// is the group's help (see Exit), not an unknown verb; a mistyped verb is
// refused with the nearest one.
func (u Usage) Verb(group string, args []string, verbs ...string) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, UsageError{Err: fmt.Errorf("%s needs one of: %v", group, verbs), Usage: u.group(group)}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return "", nil, groupHelp(group)
	}
	for _, v := range verbs {
		if args[0] == v {
			return v, args[1:], nil
		}
	}
	msg := fmt.Sprintf("%s %s: unknown; want one of %v", group, args[0], verbs)
	if near := Closest(args[0], verbs); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return "", nil, UsageError{Err: errors.New(msg), Usage: u.group(group)}
}

// groupHelp is `queue -h` and the like: the group's lines of the usage,
// printed to stdout by Exit, exit 0.
type groupHelp string

func (g groupHelp) Error() string        { return "help for " + string(g) }
func (g groupHelp) Is(target error) bool { return target == flag.ErrHelp }

// group is the lines of the usage about group's verbs, and how to see a
// verb's flags.
func (u Usage) group(group string) string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, line := range strings.Split(string(u), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "touba-trigger "+group+" ") {
			b.WriteString(line + "\n")
		}
	}
	fmt.Fprintf(&b, "Run \"touba-trigger %s VERB -h\" for a verb's flags.\n", group)
	return b.String()
}

// Exit ends a command: a group's help goes to stdout (exit 0); anything
// else is ExitCode's.
func (u Usage) Exit(err error, stdout, stderr io.Writer) int {
	var g groupHelp
	if errors.As(err, &g) {
		fmt.Fprint(stdout, u.group(string(g)))
		return ExitOK
	}
	return ExitCode(err, stderr)
}
