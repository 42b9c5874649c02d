package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// TestLeasePastPausedEntries: with 20,000 entries of a paused trigger older
// than one it can take, the lease takes that one, and its plan reads the
// paused trigger's entries not one by one but skips them in one seek of
// entries_ready_trigger (EXPLAIN ANALYZE: far fewer rows than the paused).
func TestLeasePastPausedEntries(t *testing.T) {
	st := openNodes(t, 1, time.Minute)[0]
	ctx := context.Background()
	const paused = 20000
	if _, err := st.db.pool.Exec(ctx, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr,
		received_at, status, attempts, updated_at, traceparent, conc_max, held, lease_token)
		SELECT '00000000-' || lpad(g::text, 12, '0'), 'trigger:p', 'e' || g, 'd', '\x7b7d'::bytea, '{}', '', '2026-01-01T00:00:00.000Z',
			'pending', 0, '2026-01-01T00:00:00.000Z', '', 0, false, 0 FROM generate_series(1, $1) g`, paused); err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.pool.Exec(ctx, `ANALYZE touba.entries`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Queue.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: "trigger:p", At: time.Now(), Operator: "t"}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "x", Digest: "d", Body: []byte("{}"), Headers: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.db.pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+pickAround, touba.FormatTime(time.Now()), 10)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		rows.Scan(&line)
		plan = append(plan, line)
	}
	rows.Close()
	text := strings.Join(plan, "\n")
	if strings.Contains(text, fmt.Sprintf("rows=%d loops", paused)) || strings.Contains(text, fmt.Sprintf("Removed by Filter: %d", paused)) {
		t.Fatalf("the pick read the paused trigger's entries:\n%s", text)
	}
	got, err := st.Queue.Lease(ctx, 10)
	if err != nil || len(got) != 1 || got[0].QueueID != r.QueueID {
		t.Fatalf("lease: %v %v, want only %s", got, err, r.QueueID)
	}
}
