package mdlinks_test

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/mdlinks"
)

// The slugs of headings as GitHub renders them (checked against the
// anchors the repository's own documents link, e.g. reference.md's
// contents line and the README's Deviations link).
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"2.1 The program (`touba-air-v1` subset)":                            "21-the-program-touba-air-v1-subset",
		"3.1 HTTP: `POST /triggers/<name>` for the trigger `trigger:<name>`": "31-http-post-triggersname-for-the-trigger-triggername",
		"Deviations from the contract (docs/reference.md)":                   "deviations-from-the-contract-docsreferencemd",
		"After an unclean reboot (power loss, kernel panic)":                 "after-an-unclean-reboot-power-loss-kernel-panic",
		"Schedules (`\"kind\": \"schedule\"`)":                               "schedules-kind-schedule",
		"touba-trigger — reference":                                          "touba-trigger--reference",
		"  Trailing spaces and **bold**  ":                                   "trailing-spaces-and-bold",
		"[A link](other.md) in a heading":                                    "a-link-in-a-heading",
		"snake_case and <em>tags</em>":                                       "snake_case-and-tags",
		"Été à Dakar: 100%":                                                  "été-à-dakar-100",
		"Stripe, GitHub & Shopify":                                           "stripe-github--shopify",
	} {
		if got := mdlinks.Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestAnchors(t *testing.T) {
	src := "# Intro\n\n## Setup ##\n\n## Setup\n\n### Setup\n\nSetext one\n==========\n\nSetext two\n---\n\n" +
		"- a list item\n---\n\n```md\n# Not a heading\n```\n\n<a id=\"explicit\"></a>\n<span name='named'></span>\n" +
		"## Setup-1\n"
	var got []string
	for a := range mdlinks.Anchors([]byte(src)) {
		got = append(got, a)
	}
	sort.Strings(got)
	// "Setup" three times: setup, setup-1, setup-2; then a heading whose own
	// slug is setup-1, already taken, becomes setup-1-1.
	want := []string{"explicit", "intro", "named", "setext-one", "setext-two", "setup", "setup-1", "setup-1-1", "setup-2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Anchors = %v, want %v", got, want)
	}
}

// writeTree writes files (path: content) under a new folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCheck(t *testing.T) {
	root := writeTree(t, map[string]string{
		"README.md": "# Top\n[guide](docs/guide.md#install-it) [bad anchor](docs/guide.md#nope)\n" +
			"[missing](docs/missing.md) [dir](docs/) [outside](../x.md) [up](docs/guide.md#Install-It)\n" +
			"[self](#top) [self bad](#bottom) [code line](main.go#L3) [web](https://example.com/nope)\n" +
			"![shot](docs/shot.png) [ref]\n\n[ref]: docs/gone.md\n",
		"docs/guide.md": "# Guide\n## Install it\n[back](../README.md#top) [untracked](../ignored.md)\n",
		"docs/shot.png": "png",
		"main.go":       "package main\n",
		"ignored.md":    "on disk, not in the file list\n",
	})
	tree := &mdlinks.Tree{Root: root}
	problems, err := tree.Check([]string{"README.md", "docs/guide.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`README.md:2: docs/guide.md#nope: no heading or id "nope" in docs/guide.md`,
		`README.md:3: docs/missing.md: no such file: docs/missing.md`,
		`README.md:3: ../x.md: leaves the tree`,
		`README.md:4: #bottom: no heading or id "bottom" in README.md`,
		`README.md:7: docs/gone.md: no such file: docs/gone.md`,
	}
	if got := strs(problems); !reflect.DeepEqual(got, want) {
		t.Fatalf("Check on disk:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}

	// With a file list, a file outside it does not count, even on disk.
	tree = &mdlinks.Tree{Root: root, Exists: mdlinks.Set([]string{"README.md", "docs/guide.md", "docs/shot.png", "main.go"})}
	problems, err = tree.Check([]string{"docs/guide.md"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strs(problems), []string{"docs/guide.md:3: ../ignored.md: no such file: ignored.md"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Check with a file list: got %v, want %v", got, want)
	}
	if _, err := tree.Check([]string{"absent.md"}); err == nil {
		t.Fatal("Check of a file that cannot be read: no error")
	}
}

func strs(ps []mdlinks.Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}
