package sqlwhere_test

import (
	"reflect"
	"testing"

	"github.com/touba/touba-trigger/internal/sqlwhere"
)

func TestWhere(t *testing.T) {
	var w sqlwhere.Where
	if got := w.String(); got != "" {
		t.Fatalf("empty clause %q", got)
	}
	if got := w.Args(5); !reflect.DeepEqual(got, []any{5}) {
		t.Fatalf("empty args %v", got)
	}
	w.Equal("status", "")
	w.Equal("status", "failed")
	w.Add("held = 1")
	w.Add("at >= ?", "2026-01-01")
	if got, want := w.String(), " WHERE status = ? AND held = 1 AND at >= ?"; got != want {
		t.Fatalf("clause %q, want %q", got, want)
	}
	a := w.Args(100)
	b := w.Args(7)
	// Args must not share a backing array: a second call would overwrite
	// the LIMIT of the first.
	if !reflect.DeepEqual(a, []any{"failed", "2026-01-01", 100}) || !reflect.DeepEqual(b, []any{"failed", "2026-01-01", 7}) {
		t.Fatalf("args %v and %v", a, b)
	}
}

func TestDollar(t *testing.T) {
	var w sqlwhere.Where
	w.Equal("state", "unknown")
	w.Add("seq < (SELECT seq FROM t WHERE id = ?)", "x")
	got := sqlwhere.Dollar(`SELECT a FROM t` + w.String() + ` LIMIT ?`)
	if want := `SELECT a FROM t WHERE state = $1 AND seq < (SELECT seq FROM t WHERE id = $2) LIMIT $3`; got != want {
		t.Fatalf("Dollar=%q, want %q", got, want)
	}
}
