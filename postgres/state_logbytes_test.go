package postgres

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// The delivery log on PostgreSQL keeps --delivery-log-max-bytes (every
// column counted) and --delivery-log-max-body-bytes (stored bodies) as
// the SQLite file does: past them the oldest rows go first, then the
// oldest stored bodies; the newest rows stay.
func TestDeliveryLogByteBounds(t *testing.T) {
	url := pgtest.New(t)
	st, err := Open(context.Background(), Config{URL: url, NodeID: "log", LogMaxBytes: 200_000, LogMaxBodyBytes: 30_000})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), 2000)
	for i := range 200 {
		st.State.Log(&touba.LoggedDelivery{TriggerRef: "trigger:t/T", EventID: fmt.Sprintf("e-%03d", i), StatusCode: 400,
			ErrorCode: "TriggerSignatureInvalid", Body: body, BodyStored: true})
	}
	if err := st.State.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.State.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	var rows, size, bodies int64
	var newest string
	if err := st.db.pool.QueryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(octet_length(body)), 0),
		COALESCE(MAX(event_id), '') FROM touba.deliveries`).Scan(&rows, &size, &bodies, &newest); err != nil {
		t.Fatal(err)
	}
	// About 2,250 bytes a row: 88 rows fit in 200,000; then 15 bodies in
	// 30,000.
	if size > 200_000 || rows < 80 || rows > 95 || bodies > 30_000 || bodies < 28_000 || newest != "e-199" {
		t.Fatalf("after prune: %d rows, %d bytes counted, %d body bytes, newest %s; want about 88 rows within 200000 bytes, "+
			"bodies within 30000, e-199 kept",
			rows, size, bodies, newest)
	}
	var withBody string
	if err := st.db.pool.QueryRow(ctx, `SELECT MIN(event_id) FROM touba.deliveries WHERE body IS NOT NULL`).Scan(&withBody); err != nil {
		t.Fatal(err)
	}
	if withBody <= "e-180" {
		t.Fatalf("the oldest stored body is %s's: bodies must go oldest first", withBody)
	}
	t.Logf("%d rows, %d bytes counted, %d body bytes, bodies from %s", rows, size, bodies, withBody)
}
