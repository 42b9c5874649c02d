package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Parse parses flags that may come before or after positional
// arguments, then fills every flag not given on the command line from
// TOUBA_<FLAG> (upper case, dashes as underscores), except the flags named
// in noEnv: filters such as `effects ls --state`, whose name would read
// another flag's variable (TOUBA_STATE is the state file).
func Parse(fs *flag.FlagSet, args []string, noEnv ...string) ([]string, error) {
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
			return nil, UsageError{Err: suggestFlag(fs, err), Usage: usage}
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
				err = UsageError{Err: fmt.Errorf("%s: %w", name, e)}
			}
		}
	})
	return pos, err
}

// DefaultDir is where files go when no flag names them: systemd's
// StateDirectory / RuntimeDirectory (envName) when set, else ./.touba.
func DefaultDir(envName string) string {
	if d := os.Getenv(envName); d != "" {
		// systemd may pass several colon-separated directories.
		return strings.Split(d, ":")[0]
	}
	return ".touba"
}

// Strings is a repeatable string flag: each use appends its value.
type Strings []string

func (l *Strings) String() string     { return strings.Join(*l, ",") }
func (l *Strings) Set(v string) error { *l = append(*l, v); return nil }
