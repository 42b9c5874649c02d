package main

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// write writes files (path: content; a "#!" content is made executable)
// under a new folder.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(full), 0o755)
		mode := os.FileMode(0o644)
		if strings.HasPrefix(content, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// tree lists the files under dir with their modes.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel)+" "+info.Mode().Perm().String())
		}
		return err
	})
	sort.Strings(out)
	return out
}

// ship copies the files named, what their Markdown links (transitively,
// a folder whole, images too, code blocks not), and nothing else.
func TestShipCopiesTheLinkClosure(t *testing.T) {
	src := write(t, map[string]string{
		"README.md":              "[guide](docs/guide.md) ![shot](docs/shot.png) [web](https://example.com)\n",
		"docs/guide.md":          "[example](../examples/a/README.md#run) [top](../README.md) [self](#x)\n```\n[in code](../nowhere.md)\n```\n",
		"docs/shot.png":          "png",
		"docs/unlinked.md":       "not named, not linked\n",
		"examples/a/README.md":   "# Run\n[the folder](files/)\n",
		"examples/a/files/x.sh":  "#!/bin/sh\n",
		"examples/a/files/y.txt": "y",
		"examples/b/README.md":   "not linked\n",
	})
	dest := t.TempDir()
	if err := ship(src, dest, []string{"README.md"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"README.md -rw-r--r--", "docs/guide.md -rw-r--r--", "docs/shot.png -rw-r--r--",
		"examples/a/README.md -rw-r--r--", "examples/a/files/x.sh -rwxr-xr-x", "examples/a/files/y.txt -rw-r--r--"}
	if got := tree(t, dest); !reflect.DeepEqual(got, want) {
		t.Fatalf("shipped:\n got %v\nwant %v", got, want)
	}
}

// A link to nothing, or out of the tree, fails the release, naming each.
func TestShipRefusesBrokenLinks(t *testing.T) {
	src := write(t, map[string]string{
		"README.md":     "[gone](docs/gone.md) [up](../outside.md)\n",
		"docs/other.md": "x",
	})
	err := ship(src, t.TempDir(), []string{"README.md"})
	if err == nil || !strings.Contains(err.Error(), "README.md:1: docs/gone.md") || !strings.Contains(err.Error(), "README.md:1: ../outside.md: leaves the tree") {
		t.Fatalf("ship with broken links: %v", err)
	}
}
