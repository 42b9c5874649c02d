package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestSleepsAreCommented holds the tests to issue 37's rule: a test
// sleeps only for a fault's length or for simulated work, and says which
// in a comment on the sleep's line or the line above; a poll is a
// testkit.WaitFor. It reads every *_test.go file outside scripts/ (and the
// folders the go tool skips: testdata, ., _).
func TestTestSleepsAreCommented(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) ||
				path == filepath.Join(root, "scripts") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Errorf("parse %s: %v", path, err)
			return nil
		}
		commented := map[int]bool{} // lines a comment is on
		for _, g := range f.Comments {
			for _, c := range g.List {
				for l := fset.Position(c.Pos()).Line; l <= fset.Position(c.End()).Line; l++ {
					commented[l] = true
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Sleep" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "time" {
				return true
			}
			pos := fset.Position(call.Pos())
			if !commented[pos.Line] && !commented[pos.Line-1] {
				rel, _ := filepath.Rel(root, pos.Filename)
				t.Errorf("%s:%d: time.Sleep with no comment on its line or the line above: a poll is a testkit.WaitFor; "+
					"a sleep that is a fault's length or simulated work says so", rel, pos.Line)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
