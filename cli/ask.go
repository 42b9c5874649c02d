package cli

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Confirm asks question on w and reads the answer from in: only y or yes
// confirms.
func Confirm(in io.Reader, w io.Writer, question string) bool {
	fmt.Fprint(w, question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(w)
		return false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
