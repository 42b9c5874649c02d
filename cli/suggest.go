package cli

import (
	"flag"
	"fmt"
	"strings"
)

// suggestFlag adds "did you mean --x?" to the flag package's refusal of
// an undefined flag when one defined flag is within two edits of it.
func suggestFlag(fs *flag.FlagSet, err error) error {
	const undefined = "flag provided but not defined: -"
	msg := err.Error()
	if !strings.HasPrefix(msg, undefined) {
		return err
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near := Closest(strings.TrimLeft(strings.TrimPrefix(msg, undefined), "-"), names); near != "" {
		return fmt.Errorf("%w (did you mean --%s?)", err, near)
	}
	return err
}

// Closest is the candidate nearest to s by edit distance, if it is within
// two edits and no other is as near; "" otherwise.
func Closest(s string, candidates []string) string {
	best, bestD, tie := "", 3, false
	for _, c := range candidates {
		switch d := editDistance(s, c); {
		case d < bestD:
			best, bestD, tie = c, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes; flag and
// verb names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
