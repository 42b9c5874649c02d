package layout_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// commandBudget is the most non-test Go lines cmd/touba-trigger may hold
// (issue 37, "the house"): the command keeps flag parsing, wiring and the
// dispatch to subcommands, and what a subcommand prints or does lives in
// packages of its own (report, summary, cli), where it can be read and
// tested apart. The count is `find cmd/touba-trigger -name '*.go' !
// -name '*_test.go' | xargs cat | wc -l`: testdata included.
const commandBudget = 1000

func TestCommandSize(t *testing.T) {
	dir := filepath.Join("..", "..", "cmd", "touba-trigger")
	total := 0
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		total += bytes.Count(b, []byte("\n"))
		files = append(files, strings.TrimPrefix(path, dir+string(filepath.Separator)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files under %s: the command moved, so this test counts nothing", dir)
	}
	if total > commandBudget {
		t.Errorf("cmd/touba-trigger holds %d non-test Go lines (%s), more than %d: keep flag parsing, wiring and dispatch there, "+
			"and move printing to report, check's summary to summary, shared CLI machinery to cli", total, strings.Join(files, ", "), commandBudget)
	}
}
