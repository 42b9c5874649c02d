package mdlinks

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Problem is a relative link that does not resolve.
type Problem struct {
	File   string // the Markdown file, relative to the tree's root
	Line   int    // the link's line
	Target string // the destination as written
	Reason string // what is wrong
}

// String is "file:line: target: reason".
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

// Tree is a folder of files that links may name: a repository, or an
// extracted release archive.
type Tree struct {
	// Root is the folder; paths are relative to it, slash-separated.
	Root string
	// Exists reports whether a path is a file or a folder of the tree.
	// Nil means whatever exists under Root on disk. The repository's test
	// passes the files git knows, so an ignored file does not count.
	Exists func(rel string) bool

	anchors map[string]map[string]bool
}

// scheme is a URL scheme (http:, mailto:, ...): such links are external.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// Relative reports whether a destination names a file of the tree (or a
// fragment of the same file): not a URL with a scheme, not //host.
func Relative(target string) bool {
	return target != "" && !scheme.MatchString(target) && !strings.HasPrefix(target, "//")
}

// errOutside is a link that leaves the tree.
var errOutside = errors.New("leaves the tree")

// Resolve returns the tree path a relative link of file names (file
// itself for a bare #fragment) and its fragment, unescaped. A path
// starting with / is from the root, as GitHub reads it.
func Resolve(file, target string) (string, string, error) {
	p, frag, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	var err error
	if p, err = url.PathUnescape(p); err != nil {
		return "", "", fmt.Errorf("bad escape in path: %w", err)
	}
	if frag, err = url.PathUnescape(frag); err != nil {
		return "", "", fmt.Errorf("bad escape in fragment: %w", err)
	}
	switch {
	case p == "":
		return file, frag, nil
	case strings.HasPrefix(p, "/"):
		p = path.Clean(strings.TrimLeft(p, "/"))
	default:
		p = path.Join(path.Dir(file), p)
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", "", errOutside
	}
	return p, frag, nil
}

// Check checks every relative link of the Markdown files (paths relative
// to Root): its path must exist in the tree, and a fragment of a Markdown
// file must be one of its anchors (Anchors). It returns the links that
// fail, in file and line order; an error only when a file cannot be read.
func (t *Tree) Check(files []string) ([]Problem, error) {
	var out []Problem
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(t.Root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		for _, l := range Extract(src) {
			if !Relative(l.Target) {
				continue
			}
			reason, err := t.check(f, l.Target)
			if err != nil {
				return nil, err
			}
			if reason != "" {
				out = append(out, Problem{File: f, Line: l.Line, Target: l.Target, Reason: reason})
			}
		}
	}
	return out, nil
}

// check returns why a link of file does not resolve, or "".
func (t *Tree) check(file, target string) (string, error) {
	p, frag, err := Resolve(file, target)
	if err != nil {
		return err.Error(), nil
	}
	if !t.exists(p) {
		return "no such file: " + p, nil
	}
	if frag == "" || !isMarkdown(p) {
		return "", nil
	}
	anchors, err := t.anchorsOf(p)
	if err != nil {
		return "", err
	}
	if !anchors[strings.ToLower(frag)] && !anchors[frag] {
		return fmt.Sprintf("no heading or id %q in %s", frag, p), nil
	}
	return "", nil
}

func (t *Tree) exists(p string) bool {
	if t.Exists != nil {
		return t.Exists(p)
	}
	_, err := os.Stat(filepath.Join(t.Root, filepath.FromSlash(p)))
	return err == nil
}

// anchorsOf reads (once) the anchors of a Markdown file of the tree.
func (t *Tree) anchorsOf(p string) (map[string]bool, error) {
	if a, ok := t.anchors[p]; ok {
		return a, nil
	}
	src, err := os.ReadFile(filepath.Join(t.Root, filepath.FromSlash(p)))
	if err != nil {
		return nil, err
	}
	if t.anchors == nil {
		t.anchors = map[string]map[string]bool{}
	}
	t.anchors[p] = Anchors(src)
	return t.anchors[p], nil
}

// isMarkdown reports whether a path names a Markdown file.
func isMarkdown(p string) bool {
	ext := strings.ToLower(path.Ext(p))
	return ext == ".md" || ext == ".markdown"
}

// Set is an Exists function for a list of files: each file, and each
// folder that holds one.
func Set(files []string) func(string) bool {
	m := map[string]bool{".": true}
	for _, f := range files {
		for p := path.Clean(f); p != "." && !m[p]; p = path.Dir(p) {
			m[p] = true
		}
	}
	return func(p string) bool { return m[path.Clean(p)] }
}
