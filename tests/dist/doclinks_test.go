package dist_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/mdlinks"
)

// releasedDocs lists the docs/*.md files (docs/senders/ included) of the
// released commit.
func releasedDocs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root(), "ls-tree", "-r", "--name-only", releaseRev, "docs").Output()
	if err != nil {
		t.Fatalf("git ls-tree %s docs: %v", releaseRev, err)
	}
	var md []string
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, ".md") {
			md = append(md, f)
		}
	}
	if len(md) == 0 {
		t.Fatalf("no docs/*.md at %s", releaseRev)
	}
	return md
}

// checkArchiveDocs checks an extracted archive's docs: it holds every
// docs/*.md of the released commit, and every relative link of every
// Markdown file in it names a file inside the archive (and, with a
// #fragment, a heading of it): the links a reader of the archive follows.
func checkArchiveDocs(t *testing.T, name, top string) {
	t.Helper()
	for _, f := range append(releasedDocs(t), "examples/stripe/README.md", "README.md") {
		if _, err := os.Stat(filepath.Join(top, f)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	var md []string
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() && strings.HasSuffix(strings.ToLower(p), ".md") {
			rel, _ := filepath.Rel(top, p)
			md = append(md, filepath.ToSlash(rel))
		}
		return nil
	})
	problems, err := (&mdlinks.Tree{Root: top}).Check(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", name, p)
	}
	t.Logf("%s: %d Markdown files, every relative link resolves inside the archive", name, len(md))
}

// checkPackageDocs checks that the installed package holds every
// docs/*.md of the released commit, compressed, in
// /usr/share/doc/touba-trigger (docs/senders/ as senders/).
func checkPackageDocs(t *testing.T, r string) {
	t.Helper()
	doc := filepath.Join(r, "usr/share/doc/touba-trigger")
	for _, f := range append(releasedDocs(t), "README.md", "CHANGELOG.md", "SECURITY.md") {
		if _, err := os.Stat(filepath.Join(doc, strings.TrimPrefix(f, "docs/")+".gz")); err != nil {
			t.Errorf("the package lacks %s: %v", f, err)
		}
	}
}
