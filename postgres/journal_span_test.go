package postgres

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBatchPlansKeepTheirSpan: a batch's end, outcome and prepare
// statements, whose ids come from arrays, are planned against the time
// partitions their ids span, not against every one a long history left
// (issue 42). Without the bound each plan names all twenty.
func TestBatchPlansKeepTheirSpan(t *testing.T) {
	ctx := context.Background()
	st := openNodes(t, 1, time.Hour)[0]
	d := st.db
	width := 10 * time.Second
	// Past <table>_old, which a new database's partitioning makes reach
	// beyond the partitions made ahead.
	now := time.Now().Add(365 * 24 * time.Hour).UnixMilli()
	if n, err := ensureRange(ctx, d.pool, width, now-20*width.Milliseconds(), now); err != nil || n < 20*len(ptables) {
		t.Fatalf("%d partitions created: %v", n, err)
	}
	id := func(ms int64) string { return idAt(ms)[:24] + "000000000001" }
	ids := []string{id(now - 1000), id(now - 2000)}
	lo, hi := span(ids)
	if lo != ids[1] || hi != ids[0] {
		t.Fatalf("span %s..%s of %v", lo, hi, ids)
	}
	if a, b := span([]string{"e-1", ids[0]}); a != "" || b != "" {
		t.Fatalf("span of a non-UUID id: %q %q, want no bound", a, b)
	}
	// A custom plan for each: the parameters are the plan's.
	if _, err := d.pool.Exec(ctx, `SET plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	tokens := []int64{1, 2}
	two := []string{"x", "y"}
	for _, c := range []struct {
		name, sql string
		args      []any
	}{
		{"end", endMany, []any{ids, tokens, []string{"done", "done"}, two, two, "now", lo, hi}},
		{"outcome", finishMany, []any{ids, two, tokens, []string{"applied", "applied"}, two, two, two, two, two, two, "now", "o", lo, hi}},
		{"prepare", st.Journal.prepareDispatchedMany(), []any{ids, two, two, two, two, two, two, tokens, "now", "o", lo, hi}},
	} {
		plan := explain(t, d, c.sql, c.args)
		if n := leavesIn(plan); n == 0 || n > 2 {
			t.Errorf("%s: %d time partitions of entries planned, want the one or two its ids span:\n%s", c.name, n, plan)
		}
		c.args[len(c.args)-2], c.args[len(c.args)-1] = "", ""
		if plan := explain(t, d, c.sql, c.args); leavesIn(plan) < 20 {
			t.Errorf("%s without its bound: fewer than every partition planned; the test shows nothing:\n%s", c.name, plan)
		}
	}
}

// leavesIn counts the time partitions of entries a plan names.
func leavesIn(plan string) int {
	return len(uniq(regexp.MustCompile(`entries_p[0-9]+t[0-9]+\b`).FindAllString(plan, -1)))
}

func uniq(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func explain(t *testing.T, d *db, sql string, args []any) string {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
