package mdlinks_test

import (
	"reflect"
	"testing"

	"github.com/touba/touba-trigger/internal/mdlinks"
)

func TestExtract(t *testing.T) {
	src := "# Title\n" + // 1
		"See [the guide](docs/guide.md#install) and ![a shot](img/shot.png \"title\").\n" + // 2
		"[![badge](badge.svg)](https://example.com/x)\n" + // 3
		"A link whose text\nwraps [over two\nlines](wrapped.md).\n" + // 4-6
		"Angle: [x](<with space.md>), parens: [y](a_(b).md), escaped \\[z](not-a-link.md\n" + // 7
		"```sh\n[in a fence](fenced.md)\n```\n" + // 8-10
		"   ~~~\n   [indented fence](fenced2.md)\n   ~~~\n" + // 11-13
		"`[in a span](span.md)` and ``[in ` a double span](span2.md)``\n" + // 14
		"<!-- [in a comment](comment.md) -->\n" + // 15
		"[ref]: ref/target.md#part \"Title\"\n" + // 16
		"  [angle ref]: <ref two.md>\n" + // 17
		"<a href=\"html/a.md\">a</a> <img src='html/img.png'>\n" + // 18
		"Mail [me](mailto:x@example.com), [top](#title), [http](http://example.com).\n" // 19
	got := mdlinks.Extract([]byte(src))
	want := []mdlinks.Link{
		{Line: 2, Target: "docs/guide.md#install"},
		{Line: 2, Target: "img/shot.png", Image: true},
		{Line: 3, Target: "badge.svg", Image: true},
		{Line: 3, Target: "https://example.com/x"},
		{Line: 6, Target: "wrapped.md"},
		{Line: 7, Target: "with space.md"},
		{Line: 7, Target: "a_(b).md"},
		{Line: 16, Target: "ref/target.md#part"},
		{Line: 17, Target: "ref two.md"},
		{Line: 18, Target: "html/a.md"},
		{Line: 18, Target: "html/img.png", Image: true},
		{Line: 19, Target: "mailto:x@example.com"},
		{Line: 19, Target: "#title"},
		{Line: 19, Target: "http://example.com"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Extract:\n got %+v\nwant %+v", got, want)
	}
}

func TestRelative(t *testing.T) {
	for target, want := range map[string]bool{
		"docs/a.md": true, "#x": true, "../README.md": true, "/docs/a.md": true,
		"https://x.org": false, "http://x": false, "mailto:a@b": false, "//cdn.example/x": false, "": false,
	} {
		if got := mdlinks.Relative(target); got != want {
			t.Errorf("Relative(%q) = %v, want %v", target, got, want)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct{ file, target, path, frag, err string }{
		{"docs/a.md", "b.md", "docs/b.md", "", ""},
		{"docs/a.md", "../README.md#top", "README.md", "top", ""},
		{"docs/a.md", "#local", "docs/a.md", "local", ""},
		{"docs/a.md", "/deploy/README.md", "deploy/README.md", "", ""},
		{"docs/a.md", "with%20space.md", "docs/with space.md", "", ""},
		{"docs/a.md", "senders/", "docs/senders", "", ""},
		{"docs/a.md", "../../outside.md", "", "", "leaves the tree"},
		{"README.md", "../x.md", "", "", "leaves the tree"},
	} {
		p, frag, err := mdlinks.Resolve(tc.file, tc.target)
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) || p != tc.path || frag != tc.frag {
			t.Errorf("Resolve(%q, %q) = %q, %q, %v; want %q, %q, %q", tc.file, tc.target, p, frag, err, tc.path, tc.frag, tc.err)
		}
	}
}
