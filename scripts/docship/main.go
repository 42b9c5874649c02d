// Command docship copies Markdown files, and every file they link, from a
// source tree into a release tree, so the docs a release ships can be
// read there with every relative link resolving (scripts/release runs it;
// tests/dist checks the result with the same link reader,
// internal/mdlinks).
//
//	go run ./scripts/docship -from SRC -to DEST FILE...
//
// Each FILE (a path relative to SRC) is copied to the same path under
// DEST, and so is each relative link target of each Markdown file copied,
// transitively; a linked folder is copied whole. A link that names no
// file of SRC, or leaves it, is an error: the release would ship a broken
// link. Copies are 0644, or 0755 where the source is executable, so the
// output depends only on the source tree.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/touba/touba-trigger/internal/mdlinks"
)

func main() {
	from := flag.String("from", "", "the source tree (a clone of the released commit)")
	to := flag.String("to", "", "the release tree to copy into")
	flag.Parse()
	if *from == "" || *to == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: docship -from SRC -to DEST FILE...")
		os.Exit(2)
	}
	if err := ship(*from, *to, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "docship:", err)
		os.Exit(1)
	}
}

// ship copies files and their link closure from src to dest.
func ship(src, dest string, files []string) error {
	done := map[string]bool{}
	queue := append([]string(nil), files...)
	var broken []string
	for len(queue) > 0 {
		p := path.Clean(filepath.ToSlash(queue[0]))
		queue = queue[1:]
		if done[p] {
			continue
		}
		done[p] = true
		full := filepath.Join(src, filepath.FromSlash(p))
		st, err := os.Stat(full)
		if err != nil {
			return err
		}
		if st.IsDir() {
			sub, err := filesUnder(src, p)
			if err != nil {
				return err
			}
			queue = append(queue, sub...)
			continue
		}
		if err := copyFile(full, filepath.Join(dest, filepath.FromSlash(p)), st.Mode()); err != nil {
			return err
		}
		if !strings.HasSuffix(strings.ToLower(p), ".md") {
			continue
		}
		b, err := os.ReadFile(full)
		if err != nil {
			return err
		}
		for _, l := range mdlinks.Extract(b) {
			if !mdlinks.Relative(l.Target) {
				continue
			}
			target, _, err := mdlinks.Resolve(p, l.Target)
			if err == nil {
				if _, err = os.Stat(filepath.Join(src, filepath.FromSlash(target))); err == nil {
					queue = append(queue, target)
					continue
				}
			}
			broken = append(broken, fmt.Sprintf("%s:%d: %s: %v", p, l.Line, l.Target, err))
		}
	}
	if len(broken) > 0 {
		return errors.New("links that name no file of the tree:\n  " + strings.Join(broken, "\n  "))
	}
	return nil
}

// filesUnder lists the files under the folder p of src, sorted.
func filesUnder(src, p string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(filepath.Join(src, filepath.FromSlash(p)), func(f string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, f)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	sort.Strings(out)
	return out, err
}

// copyFile copies a regular file, 0755 if the source is executable by
// anyone, else 0644.
func copyFile(from, to string, mode fs.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	perm := fs.FileMode(0o644)
	if mode&0o111 != 0 {
		perm = 0o755
	}
	if err := os.WriteFile(to, b, perm); err != nil {
		return err
	}
	return os.Chmod(to, perm) // WriteFile keeps an existing file's mode
}
