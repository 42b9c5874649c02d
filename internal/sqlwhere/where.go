// Package sqlwhere builds the WHERE clauses of the stores' listings, for
// SQLite (? placeholders) and PostgreSQL (Dollar numbers them $1, $2, ...).
package sqlwhere

import (
	"strconv"
	"strings"
)

// Where builds the WHERE clause of a listing from optional filters: each
// condition is ANDed, its arguments kept in order. The zero value is an
// empty clause.
type Where struct {
	conds []string
	args  []any
}

// Add appends a condition with the arguments of its placeholders.
func (w *Where) Add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

// Equal adds "col = ?" when value is set: an empty filter field matches
// every row.
func (w *Where) Equal(col, value string) {
	if value != "" {
		w.Add(col+" = ?", value)
	}
}

// String renders " WHERE a AND b", or "" without conditions.
func (w *Where) String() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// Args returns the conditions' arguments followed by more (a LIMIT, say).
func (w *Where) Args(more ...any) []any {
	return append(w.args[:len(w.args):len(w.args)], more...)
}

// Dollar rewrites the ? placeholders of query as PostgreSQL's $1, $2, ...,
// in order. The stores' listing queries hold no other question mark.
func Dollar(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
