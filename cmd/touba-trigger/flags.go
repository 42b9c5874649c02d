package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// newFlagSet returns a flag set that reports errors instead of exiting,
// and whose usage (-h, or after a refused flag) starts with the command's
// synopsis lines from the main usage, then its flags.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintln(out, "usage:")
		for _, line := range synopsis(name) {
			fmt.Fprintln(out, line)
		}
		fmt.Fprintln(out, "flags (each also read from TOUBA_<FLAG>):")
		fs.PrintDefaults()
	}
	return fs
}

// synopsis are the lines of the main usage for the command name ("serve",
// "queue ls"), with the lines that continue them.
func synopsis(name string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(usageText(), "\n") {
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

// parseArgs parses flags that may come before or after positional
// arguments, then fills every flag not given on the command line from
// TOUBA_<FLAG> (upper case, dashes as underscores), except the flags named
// in noEnv: filters such as `effects ls --state`, whose name would read
// another flag's variable (TOUBA_STATE is the state file).
func parseArgs(fs *flag.FlagSet, args []string, noEnv ...string) ([]string, error) {
	// The flag package prints its error, then the usage; the refusal line
	// must come first, so both are held and the usage follows the line.
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	defer fs.SetOutput(out)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				_, _ = out.Write(buf.Bytes())
				return nil, err
			}
			_, usage, _ := strings.Cut(buf.String(), "\n")
			return nil, usageError{err: suggestFlag(fs, err), usage: usage}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// --state-file and --state name one value: given either way on the
	// command line, TOUBA_STATE must not replace it.
	if set["state-file"] {
		set["state"] = true
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil || slices.Contains(noEnv, f.Name) {
			return
		}
		name := "TOUBA_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if e := f.Value.Set(v); e != nil {
				err = usageError{err: fmt.Errorf("%s: %w", name, e)}
			}
		}
	})
	return pos, err
}

// defaultDir is where files go when no flag names them: systemd's
// StateDirectory / RuntimeDirectory when set, else ./.touba.
func defaultDir(envName string) string {
	if d := os.Getenv(envName); d != "" {
		// systemd may pass several colon-separated directories.
		return strings.Split(d, ":")[0]
	}
	return ".touba"
}
