package mdlinks

import "strings"

// Blank returns the document with fenced code blocks, code spans and HTML
// comments replaced by spaces (newlines kept), so offsets and line numbers
// stay those of the original and nothing inside code is read as a link
// or a heading. A fence is a line whose text starts with ``` or ~~~, at
// any indentation (fences inside list items are indented).
func Blank(src string) string {
	b := []byte(src)
	blankFences(b)
	blankComments(b)
	blankCodeSpans(b)
	return string(b)
}

// blankFences blanks each fenced block, its fence lines included. An
// unclosed fence runs to the end of the document, as in CommonMark.
func blankFences(b []byte) {
	var fence string // the opening run (``` or ~~~~...) while inside a block
	for start := 0; start < len(b); {
		end := start
		for end < len(b) && b[end] != '\n' {
			end++
		}
		line := strings.TrimLeft(string(b[start:end]), " \t")
		switch {
		case fence == "" && (strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~")):
			fence = run(line)
			blankRange(b, start, end)
		case fence != "":
			if strings.HasPrefix(line, fence) && strings.TrimSpace(strings.TrimLeft(line, fence[:1])) == "" {
				fence = ""
			}
			blankRange(b, start, end)
		}
		start = end + 1
	}
}

// run is the leading run of line's first character.
func run(line string) string {
	i := 0
	for i < len(line) && line[i] == line[0] {
		i++
	}
	return line[:i]
}

// blankComments blanks <!-- ... --> (to the end when unclosed).
func blankComments(b []byte) {
	s := string(b)
	for i := 0; ; {
		open := strings.Index(s[i:], "<!--")
		if open < 0 {
			return
		}
		open += i
		end := strings.Index(s[open+4:], "-->")
		if end < 0 {
			blankRange(b, open, len(b))
			return
		}
		end += open + 4 + 3
		blankRange(b, open, end)
		i = end
	}
}

// blankCodeSpans blanks each code span: a run of n backticks up to the
// next run of exactly n, within one paragraph. A run with no closing run
// is literal text.
func blankCodeSpans(b []byte) {
	for i := 0; i < len(b); {
		if b[i] != '`' || (i > 0 && b[i-1] == '\\') {
			i++
			continue
		}
		n := ticks(b, i)
		closeAt := -1
		for j := i + n; j < len(b); {
			if b[j] == '\n' && j+1 < len(b) && b[j+1] == '\n' {
				break
			}
			if b[j] == '`' {
				m := ticks(b, j)
				if m == n {
					closeAt = j
					break
				}
				j += m
				continue
			}
			j++
		}
		if closeAt < 0 {
			i += n
			continue
		}
		blankRange(b, i, closeAt+n)
		i = closeAt + n
	}
}

// ticks is the length of the backtick run at i.
func ticks(b []byte, i int) int {
	n := 0
	for i+n < len(b) && b[i+n] == '`' {
		n++
	}
	return n
}

// blankRange replaces b[from:to] with spaces, keeping newlines.
func blankRange(b []byte, from, to int) {
	for i := from; i < to && i < len(b); i++ {
		if b[i] != '\n' {
			b[i] = ' '
		}
	}
}
