package mdlinks

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

var (
	atx      = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+|$)`)
	atxClose = regexp.MustCompile(`[ \t]+#+[ \t]*$`)
	setext   = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	// htmlID is an id or name attribute of an HTML tag: <a id="x"></a>.
	htmlID = regexp.MustCompile(`(?i)<[a-z][a-z0-9]*\b[^>]*?\b(?:id|name)\s*=\s*("[^"]*"|'[^']*')`)
	// inlineLink is [text](dest) or ![alt](dest): its text is what shows.
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`</?[A-Za-z][^>]*>`)
)

// Anchors returns the fragments a link may name in the document: the
// slug of every heading as GitHub makes it (a repeated slug gets -1, -2,
// ...), and every id or name attribute of an HTML tag.
func Anchors(src []byte) map[string]bool {
	orig := strings.Split(string(src), "\n")
	blank := strings.Split(Blank(string(src)), "\n")
	out := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		slug := Slug(heading)
		if n, dup := seen[slug]; dup {
			// github-slugger: the next free slug-N.
			for {
				n++
				cand := slug + "-" + strconv.Itoa(n)
				if _, taken := seen[cand]; !taken {
					seen[slug] = n
					slug = cand
					break
				}
			}
		}
		seen[slug] = 0
		out[slug] = true
	}
	for i, line := range blank {
		switch {
		case atx.MatchString(line):
			text := atx.ReplaceAllString(orig[i], "")
			add(atxClose.ReplaceAllString(text, ""))
		case i > 0 && setext.MatchString(line) && paragraphLine(blank[i-1]):
			add(orig[i-1])
		}
	}
	for _, m := range htmlID.FindAllStringSubmatch(Blank(string(src)), -1) {
		out[m[1][1:len(m[1])-1]] = true
	}
	return out
}

// paragraphLine reports whether a line can be the text of a setext
// heading: not blank, not a heading, a list item, a quote or a table row.
func paragraphLine(line string) bool {
	t := strings.TrimSpace(line)
	if t == "" || atx.MatchString(line) || setext.MatchString(line) {
		return false
	}
	switch t[0] {
	case '-', '*', '+', '>', '|':
		return false
	}
	return true
}

// Slug is GitHub's anchor for a heading's Markdown text: the text as it
// renders (code spans' content, links' text, no HTML tags, no emphasis
// marks), lowercased, with every character that is not a letter, a
// digit, a mark, '_', '-' or a space dropped, and each space made '-'.
func Slug(heading string) string {
	text := strings.TrimSpace(heading)
	text = inlineLink.ReplaceAllString(text, "$1")
	text = stripTagsOutsideCode(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// stripTagsOutsideCode removes HTML tags (which render as nothing) but
// keeps code spans' content as text: `<name>` in a code span shows as
// <name>, whose brackets the slug then drops.
func stripTagsOutsideCode(s string) string {
	var b strings.Builder
	for i, part := range strings.Split(s, "`") {
		if i%2 == 0 {
			part = htmlTag.ReplaceAllString(part, "")
		}
		b.WriteString(part)
	}
	return b.String()
}
