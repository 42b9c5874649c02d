package sqlitex

import "strings"

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
