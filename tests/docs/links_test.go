// Package docs_test holds the repository's documentation to its links:
// every relative link and image of every Markdown file git knows must name
// a file of the repository and, with a #fragment, a heading of that file
// (GitHub's anchor rules). External links are not fetched.
package docs_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/mdlinks"
)

// root is the repository's root folder.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// gitFiles lists the files git knows in the work tree: tracked ones and
// new ones not ignored (a file just written counts before git add; an
// ignored one, such as .touba/ or dist/, never does).
func gitFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root(), "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("not a git work tree (git ls-files: %v): the link check reads the files git knows", err)
	}
	var files []string
	seen := map[string]bool{}
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" && !seen[f] {
			seen[f] = true
			files = append(files, f)
		}
	}
	return files
}

// TestMarkdownLinks fails naming file, line and target for each relative
// link that names no file of the repository, leaves it, or names a
// fragment that is no heading or HTML id of its Markdown target.
func TestMarkdownLinks(t *testing.T) {
	files := gitFiles(t)
	var md []string
	for _, f := range files {
		if strings.HasSuffix(strings.ToLower(f), ".md") {
			md = append(md, f)
		}
	}
	if len(md) < 10 {
		t.Fatalf("git lists %d Markdown files: %v", len(md), md)
	}
	tree := &mdlinks.Tree{Root: root(), Exists: mdlinks.Set(files)}
	problems, err := tree.Check(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	t.Logf("checked the relative links of %d Markdown files", len(md))
}
