package queue

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/sqlitex"
)

// The statements that find a wait's match, an earlier offer, the entries
// a delivery cancels and the entries due to wake read their indexes:
// their cost does not grow with the waiting entries (issue 25, "a
// wait_for match is found by an index, not a scan"). The tables are
// filled and analysed so the planner sees real sizes.
func TestWaitStatementsUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	q, err := Open(ctx, filepath.Join(t.TempDir(), "queue.sqlite"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const series = `WITH RECURSIVE series(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM series WHERE value < 20000) `
	fill := []string{
		`INSERT INTO waits (queue_id, step_id, kind, key, value, wake_at, state, matched_queue_id, created_at)
		 SELECT printf('q%06d', value), 'paid', 'event', 'trigger:a#paid', printf('"o-%d"', value), NULL,
		        CASE WHEN value % 10 = 0 THEN 'open' ELSE 'matched' END, '', '2026-12-01T00:00:00.000Z'
		 FROM series`,
		`INSERT INTO offers (key, value, queue_id, consumed_by, created_at)
		 SELECT 'trigger:a#paid', printf('"o-%d"', value), printf('p%06d', value),
		        CASE WHEN value % 10 = 0 THEN NULL ELSE 'x' END, '2026-12-01T00:00:00.000Z'
		 FROM series`,
		`INSERT INTO cancel_keys (key, value, queue_id)
		 SELECT 'trigger:a#cancel_on/0', printf('"o-%d"', value), printf('q%06d', value) FROM series`,
		`ANALYZE`,
	}
	for _, s := range fill {
		if !strings.HasPrefix(s, "ANALYZE") {
			s = series + s
		}
		if _, err := q.db.Write.ExecContext(ctx, s); err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
	for _, c := range []struct {
		name, query string
		args        []any
		index       string
	}{
		{"intake's match of an open wait", qOpenWait, []any{"trigger:a#paid", `"o-10"`}, "waits_open"},
		{"BeginWait's earlier offer", qFirstOffer, []any{"trigger:a#paid", `"o-10"`}, "offers_open"},
		{"intake's cancel", qCancelable, []any{"trigger:a#cancel_on/0", `"o-10"`, "z"}, "cancel_keys_match"},
		{"Wake's due entries", qWakeDue, []any{"2026-12-01T00:00:00.000Z", "2026-12-01T00:00:00.000Z", 1000}, "entries_wake"},
	} {
		plan, err := sqlitex.QueryPlan(ctx, q.db.Write, c.query, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		all := strings.Join(plan, "; ")
		for _, table := range []string{"waits", "offers", "cancel_keys", "entries"} {
			if strings.Contains(all, "SCAN "+table+" ") || strings.HasSuffix(all, "SCAN "+table) {
				t.Errorf("%s scans %s: %s", c.name, table, all)
			}
		}
		if !strings.Contains(all, c.index) {
			t.Errorf("%s does not use %s: %s", c.name, c.index, all)
		}
		t.Logf("%s: %s", c.name, all)
	}
}
