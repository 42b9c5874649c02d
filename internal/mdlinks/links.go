// Package mdlinks reads the relative links of Markdown files and checks
// that each names a file that exists and, with a #fragment, a heading (or
// an HTML id) of that file, by GitHub's anchor rules. The repository's
// link test (tests/docs) and the release test (tests/dist) both use it, so
// the docs a user reads on GitHub and the ones in a release archive are
// held to the same rules; the release script uses it to ship every file
// the shipped docs link (cmd/mdship).
//
// It reads CommonMark's link forms that matter in practice: inline links
// and images ([text](dest "title"), ![alt](<dest>)), reference
// definitions ([label]: dest), and href and src attributes of HTML tags.
// Code blocks, code spans and HTML comments are not read.
package mdlinks

import (
	"regexp"
	"strings"
)

// Link is one link destination of a Markdown file.
type Link struct {
	Line   int    // 1-based line of the destination
	Target string // the destination as written (before any unescaping)
	Image  bool   // an image (![alt](dest)) rather than a link
}

var (
	// refDef is a link reference definition: up to three spaces, [label]:,
	// then the destination, bare or in angle brackets.
	refDef = regexp.MustCompile(`(?m)^ {0,3}\[((?:[^\]\\]|\\.)+)\]:[ \t]*(<[^>\n]*>|\S+)`)
	// htmlRef is an href or src attribute of an HTML tag.
	htmlRef = regexp.MustCompile(`(?i)<[a-z][a-z0-9]*\b[^>]*?\b(?:href|src)\s*=\s*("[^"]*"|'[^']*')`)
)

// Extract returns the link destinations of a Markdown document in the
// order they appear. Destinations of every kind are returned, external
// ones included; Relative says which are files.
func Extract(src []byte) []Link {
	text := Blank(string(src))
	var links []Link
	for i := 0; i+1 < len(text); i++ {
		if text[i] != ']' || text[i+1] != '(' || escaped(text, i) {
			continue
		}
		open := openBracket(text, i)
		if open < 0 {
			continue
		}
		dest, at, ok := destination(text, i+2)
		if !ok {
			continue
		}
		links = append(links, Link{Line: lineOf(text, at), Target: dest, Image: open > 0 && text[open-1] == '!'})
	}
	for _, m := range refDef.FindAllStringSubmatchIndex(text, -1) {
		dest := strings.TrimSuffix(strings.TrimPrefix(text[m[4]:m[5]], "<"), ">")
		links = append(links, Link{Line: lineOf(text, m[4]), Target: dest})
	}
	for _, m := range htmlRef.FindAllStringSubmatchIndex(text, -1) {
		v := text[m[2]+1 : m[3]-1]
		links = append(links, Link{Line: lineOf(text, m[2]), Target: v, Image: strings.HasPrefix(strings.ToLower(text[m[0]:]), "<img")})
	}
	sortByLine(links)
	return links
}

// escaped reports whether the byte at i is escaped by an odd number of
// backslashes before it.
func escaped(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// openBracket finds the [ that opens the link text closed by the ] at i,
// counting nested brackets, within the paragraph (no blank line between).
func openBracket(s string, i int) int {
	depth := 0
	for j := i - 1; j >= 0; j-- {
		switch {
		case s[j] == '\n' && j > 0 && s[j-1] == '\n':
			return -1
		case escaped(s, j):
		case s[j] == ']':
			depth++
		case s[j] == '[':
			if depth == 0 {
				return j
			}
			depth--
		}
	}
	return -1
}

// destination reads an inline link's destination starting at i (just
// after the opening parenthesis): <...>, or a run without spaces whose
// parentheses balance. It returns the destination and its offset.
func destination(s string, i int) (string, int, bool) {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	if i < len(s) && s[i] == '<' {
		end := strings.IndexAny(s[i+1:], ">\n")
		if end < 0 || s[i+1+end] != '>' {
			return "", 0, false
		}
		return s[i+1 : i+1+end], i, true
	}
	start, depth := i, 0
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return s[start:i], start, true
			}
			depth--
		case c == ' ' || c == '\t' || c == '\n':
			// A title follows; the destination ends here.
			return s[start:i], start, depth == 0
		case c < ' ':
			return "", 0, false
		}
	}
	return "", 0, false
}

// lineOf is the 1-based line of offset i.
func lineOf(s string, i int) int { return strings.Count(s[:i], "\n") + 1 }

// sortByLine orders links by line, keeping the order of a line's links
// (insertion sort: a file has few links).
func sortByLine(l []Link) {
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j].Line < l[j-1].Line; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}
