// Package layout_test holds the project's layout to the architecture
// (DESIGN.md): the root imports nothing of the project, and the CLI
// reaches storage only through server.
package layout_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/touba/touba-trigger"

// imports are the project packages the non-test files of dir import.
func imports(t *testing.T, dir string) map[string][]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p == module || strings.HasPrefix(p, module+"/") {
				out[p] = append(out[p], name)
			}
		}
	}
	return out
}

func TestRootImportsNothingOfTheProject(t *testing.T) {
	for p, files := range imports(t, filepath.Join("..", "..")) {
		t.Errorf("the root package imports %s (%s): it holds the domain and imports nothing of the project", p, strings.Join(files, ", "))
	}
}

func TestCLIReachesStorageOnlyThroughServer(t *testing.T) {
	for p, files := range imports(t, filepath.Join("..", "..", "cmd", "touba-trigger")) {
		rel := strings.TrimPrefix(p, module+"/")
		for _, backend := range []string{"sqlite", "postgres", "internal/sqlitex", "internal/pgx"} {
			if rel == backend || strings.HasPrefix(rel, backend+"/") {
				t.Errorf("cmd/touba-trigger imports %s (%s): the CLI reaches storage through server only", p, strings.Join(files, ", "))
			}
		}
	}
}
