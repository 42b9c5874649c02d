package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Queue is the queue of every node: entries, identities and leases.
type Queue struct {
	db       *db
	enqueued atomic.Int64
	batched  atomic.Int64
	// pendingSeen is the count of pending entries of every node, read
	// every second: the --max-pending check of intake, which must not
	// cost a count per request.
	pendingSeen atomic.Int64
	// takenOverAt is when a lease last looked for expired leases (unix
	// ns): a full lease looks at most every takeOverEvery (queue_lease.go).
	takenOverAt atomic.Int64
	// recountedAt is when this node last recounted the held entries
	// (unix ns, queue_holdcount.go).
	recountedAt atomic.Int64
	stop        chan struct{}
	wg          sync.WaitGroup
	closeOnce   sync.Once
}

func newQueue(d *db) *Queue { return &Queue{db: d, stop: make(chan struct{})} }

var _ touba.QueueStore = (*Queue)(nil)

// start recounts the held entries and reads the pending count; then,
// every second, it folds the held counts' deltas (a recount every
// holdRecountEvery) and reads the pending count again when it is due
// (pendingRecountEvery); every floorEvery it raises the lease's floor
// (queue_floor.go).
func (q *Queue) start(ctx context.Context) error {
	if err := q.recountHolds(ctx); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	n, err := q.countPending(ctx)
	if err != nil {
		return fmt.Errorf("queue: count pending: %w", err)
	}
	q.pendingSeen.Store(n)
	if err := q.raiseFloor(ctx); err != nil {
		return fmt.Errorf("queue: lease floor: %w", err)
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		counted, raised := time.Now(), time.Now()
		for {
			select {
			case <-q.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := q.tendHolds(ctx); err != nil {
				q.db.log.Warn().Err(err).Msg("cannot fold the held counts; retrying")
			}
			if time.Since(counted) >= pendingRecountEvery(q.pendingSeen.Load(), q.db.cfg.MaxPending) {
				if n, err := q.countPending(ctx); err == nil {
					q.pendingSeen.Store(n)
				}
				counted = time.Now()
			}
			if time.Since(raised) >= floorEvery {
				if err := q.raiseFloor(ctx); err != nil {
					q.db.log.Warn().Err(err).Msg("cannot raise the lease floor; retrying")
				}
				raised = time.Now()
			}
			cancel()
		}
	}()
	return nil
}

func (q *Queue) close() {
	q.closeOnce.Do(func() { close(q.stop); q.wg.Wait() })
}

// pendingRecountEvery is how often the pending count is read again,
// seen the count and --max-pending. The count reads every pending entry's
// index entry: 135 ms a count at 100,000 pending on a loaded box, once a
// second on every node, a fifth of the database's time in a drain of
// that backlog. Between 10,000 pending and half the bound it is read every
// 10 s: this node's own entries are added to the count as it makes them,
// intake recounts before a refusal, and other nodes would need to add
// half the bound within 10 s to pass it unseen. Below 10,000 a count is
// cheap, and from half the bound on it must be fresh: every second.
func pendingRecountEvery(seen, max int64) time.Duration {
	if seen < 10_000 || seen >= max/2 {
		return time.Second
	}
	return 10 * time.Second
}

func (q *Queue) countPending(ctx context.Context) (int64, error) {
	return q.pendingNow(ctx)
}

// Pending returns the number of pending entries of every node, read now
// (or -1 when the database does not answer).
func (q *Queue) Pending() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := q.countPending(ctx)
	if err != nil {
		return -1
	}
	return n
}

// Ping checks that the database answers, for /readyz.
func (q *Queue) Ping(ctx context.Context) error {
	_, err := q.db.pool.Exec(ctx, `SELECT 1`)
	return err
}

// QueueStats counts this node's intake work.
func (q *Queue) QueueStats() touba.QueueStats {
	return touba.QueueStats{Commits: q.db.stats().Commits, Enqueued: q.enqueued.Load(), Batched: q.batched.Load()}
}

const entryColumns = `queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at,
	status, attempts, COALESCE(error_code, ''), updated_at, traceparent, COALESCE(conc_key, ''), conc_max, held,
	lease_token, COALESCE(lease_owner, ''), COALESCE(lease_owner, last_node, ''), program_digest, wake_at,
	COALESCE(merged_into, '')`

type scanner interface{ Scan(...any) error }

func scanEntry(s scanner) (*touba.Delivery, error) {
	var d touba.Delivery
	var hdr, recv, upd string
	var wake *string
	if err := s.Scan(&d.QueueID, &d.TriggerRef, &d.EventID, &d.Digest, &d.Body, &hdr, &d.RemoteAddr, &recv,
		&d.Status, &d.Attempts, &d.ErrorCode, &upd, &d.TraceParent, &d.ConcKey, &d.ConcMax, &d.Held,
		&d.LeaseToken, &d.LeaseOwner, &d.Node, &d.ProgramDigest, &wake, &d.MergedInto); err != nil {
		return nil, err
	}
	if wake != nil {
		t, err := touba.ParseTime(*wake)
		if err != nil {
			return nil, fmt.Errorf("entry %s: wake_at: %w", d.QueueID, err)
		}
		d.WakeAt = &t
	}
	if err := json.Unmarshal([]byte(hdr), &d.Headers); err != nil {
		return nil, fmt.Errorf("entry %s: headers: %w", d.QueueID, err)
	}
	var err error
	if d.ReceivedAt, err = touba.ParseTime(recv); err != nil {
		return nil, fmt.Errorf("entry %s: received_at: %w", d.QueueID, err)
	}
	if d.UpdatedAt, err = touba.ParseTime(upd); err != nil {
		return nil, fmt.Errorf("entry %s: updated_at: %w", d.QueueID, err)
	}
	return &d, nil
}
