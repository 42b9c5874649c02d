package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/cli"
)

// `version`, `--version` and `version --json` through the CLI's Run, on
// this test binary's own build info.
func TestVersionCommand(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, errb.String())
		}
		first, _, _ := strings.Cut(out.String(), "\n")
		if got, want := first, "touba-trigger "+Version; got != want {
			t.Fatalf("%v: first line %q, want %q", args, got, want)
		}
		if !strings.Contains(out.String(), runtime.Version()) {
			t.Fatalf("%v: no Go version in %q", args, out.String())
		}
	}
	for _, args := range [][]string{{"version", "--json"}, {"--version", "--json"}} {
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, errb.String())
		}
		var v map[string]any
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("%v: %v in %s", args, err, out.String())
		}
		for _, k := range []string{"version", "go_version", "platform", "modified"} {
			if _, ok := v[k]; !ok {
				t.Fatalf("%v: no %q in %s", args, k, out.String())
			}
		}
		if got, want := v["go_version"], runtime.Version(); got != want {
			t.Fatalf("go_version=%v, want %v", got, want)
		}
	}
	var out, errb bytes.Buffer
	if code := Run(ctx, []string{"version", "extra"}, &out, &errb); code != cli.ExitUsage {
		t.Fatalf("version extra: exit %d, want %d", code, cli.ExitUsage)
	}
}
