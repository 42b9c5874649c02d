package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Under a backlog a lease looks for expired leases only every
// takeOverEvery, but a look that filled the lease leaves the next one due:
// a dead node's entries are taken over lease after lease, however small
// the leases, not n every 500 ms behind the pending ones.
func TestTakeOverOfManyExpiredLeasesIsNotPaced(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	dead := map[string]bool{}
	for _, d := range leaseAll(t, st, 20) {
		dead[d.QueueID] = true
	}
	if _, err := st.db.pool.Exec(ctx, `UPDATE touba.entries SET lease_expires_at = `+st.db.dbTime(-time.Minute)+`
		WHERE status = 'running'`); err != nil {
		t.Fatal(err)
	}
	// The leases' look above found none expired: as a minute later, due.
	st.Queue.takenOverAt.Store(0)
	for i := range 50 {
		d := &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("p-%d", i), Digest: "d", Body: []byte(`{}`)}
		if _, err := st.Queue.Enqueue(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	taken := 0
	for range 4 {
		got, err := st.Queue.Lease(ctx, 5)
		if err != nil || len(got) != 5 {
			t.Fatalf("lease: %d entries, %v", len(got), err)
		}
		for _, d := range got {
			if dead[d.QueueID] {
				taken++
			}
		}
	}
	if took := time.Since(start); taken != 20 && took < takeOverEvery {
		t.Fatalf("4 leases of 5 in %s took over %d of the 20 expired entries, want all 20 before any pending one", took, taken)
	}
	// None left: the next lease takes pending entries, and the look waits.
	got, err := st.Queue.Lease(ctx, 5)
	if err != nil || len(got) != 5 || dead[got[0].QueueID] {
		t.Fatalf("fifth lease: %d entries, %v", len(got), err)
	}
}
