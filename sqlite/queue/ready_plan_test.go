package queue

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// entries_ready holds pending entries only (0014_ready_pending.sql): the
// statements that read it still do, over a queue of mostly finished
// entries, and none scans entries.
func TestReadyStatementsUseEntriesReady(t *testing.T) {
	ctx := context.Background()
	q, err := Open(ctx, filepath.Join(t.TempDir(), "queue.sqlite"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.db.Write.ExecContext(ctx, `WITH RECURSIVE series(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM series WHERE value < 20000)
		INSERT INTO entries (queue_id, trigger_ref, event_id, digest, headers, remote_addr, received_at, status, updated_at, held)
		SELECT printf('q%06d', value), printf('trigger:t%d', value % 11), printf('e%d', value), 'd', '{}', '', '2026-12-01T00:00:00.000Z',
		       CASE WHEN value % 10 = 0 THEN 'pending' WHEN value % 10 = 1 THEN 'running' ELSE 'done' END,
		       '2026-12-01T00:00:00.000Z', value % 20 = 0
		FROM series`); err != nil {
		t.Fatalf("fill: %v", err)
	}
	if _, err := q.db.Write.ExecContext(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, query string
		args        []any
	}{
		{"the lease", qLease, []any{"2026-12-01T00:00:00.000Z", "2026-12-01T00:00:00.000Z", 10}},
		{"the held listing", `SELECT queue_id FROM entries WHERE status = 'pending' AND held = 1 ORDER BY queue_id LIMIT 50`, nil},
	} {
		plan := queryPlan(t, q, c.query, c.args...)
		if !strings.Contains(plan, "USING INDEX entries_ready") && !strings.Contains(plan, "USING COVERING INDEX entries_ready") {
			t.Errorf("%s does not read entries_ready: %s", c.name, plan)
		}
		if strings.Contains(plan, "SCAN entries") || strings.Contains(plan, "SCAN e ") {
			t.Errorf("%s scans entries: %s", c.name, plan)
		}
	}
}

func queryPlan(t *testing.T, q *Queue, query string, args ...any) string {
	t.Helper()
	rows, err := q.db.Write.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}
