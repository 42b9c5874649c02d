package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// enqueueOp is one delivery of a batch, decided at commit.
type enqueueOp struct {
	d       *touba.Delivery
	headers string
	res     touba.EnqueueResult
	retry   bool // lost a deadlock: undone, to be tried again
	busy    bool // its key's lock is held elsewhere: nothing written, to be asked again
	// routing is what the entry records of routes (touba.RoutingOf), and
	// routes what each of its routes' entries records; batchRoutes says
	// that flushEnqueues stores its routes' entries (queue_routes.go).
	routing     []byte
	routes      [][]byte
	batchRoutes bool
}

// Enqueue takes the identity decision and stores a new entry, in the
// writer's next batch; it returns once that batch committed (or failed).
// Every wait is bounded by ctx and --database-timeout: past it the
// delivery is refused (503), though it may have committed.
func (q *Queue) Enqueue(ctx context.Context, d *touba.Delivery) (touba.EnqueueResult, error) {
	ctx, cancel := q.db.bounded(ctx)
	defer cancel()
	hdr := []byte("{}")
	if d.Headers != nil {
		var err error
		if hdr, err = json.Marshal(d.Headers); err != nil {
			return touba.EnqueueResult{}, fmt.Errorf("encode headers: %w", err)
		}
	}
	if d.ReceivedAt.IsZero() {
		d.ReceivedAt = q.db.cfg.Now()
	}
	newID := d.QueueID == ""
	if newID {
		d.QueueID = q.db.newEntryID()
	}
	if q.pendingSeen.Load() >= q.db.cfg.MaxPending {
		// The count seen may be a second old: count again before refusing.
		if n, err := q.countPending(ctx); err == nil {
			q.pendingSeen.Store(n)
		}
	}
	if q.pendingSeen.Load() >= q.db.cfg.MaxPending {
		// Full: a known identity still gets its true answer.
		if d.EventID != "" {
			if ex, ok, err := lookup(ctx, q.db.pool, d); err != nil {
				return touba.EnqueueResult{}, err
			} else if ok {
				return ex, nil
			}
		}
		return touba.EnqueueResult{}, touba.ErrQueueFull
	}
	// Refused here, not in the writer: a btree index refuses a row over
	// about 2,700 bytes, and that error is the batch's transaction's, which
	// failed every delivery of the batch (issue 43).
	err := d.CheckKeys()
	if err == nil && d.Gather != nil {
		err = d.Gather.Check()
	}
	for _, r := range d.Routes {
		if err == nil {
			err = checkRoute(r)
		}
	}
	if err != nil {
		if newID {
			d.QueueID = ""
		}
		return touba.EnqueueResult{}, err
	}
	op := &enqueueOp{d: d, headers: string(hdr)}
	op.routing, op.routes = touba.RoutingOf(d, q.db.newEntryID)
	keyed := d.ConcKey != "" && d.ConcMax > 0
	// A gathered delivery takes the durable path: decided now, under its
	// gathering's lock (queue_gather.go); so does one with a route that
	// would (queue_routes.go).
	durable := isDurable(d) || len(d.Routes) > 0 && (keyed ||
		slices.ContainsFunc(d.Routes, func(r *touba.Delivery) bool { return isDurable(r) || isKeyed(r) }))
	op.batchRoutes = len(d.Routes) > 0 && !durable
	backoff := 5 * time.Millisecond
	for try := 1; ; try++ {
		op.retry, op.busy = false, false
		err = q.db.w.TryShared(ctx, func(ctx context.Context, tx *Tx) error {
			if durable {
				// Its offers, cancels and cancel keys are applied with it,
				// under the locks of its offers' values: decided now, in
				// the batch's transaction (queue_waits_intake.go).
				err := shortWait(ctx, tx, func() error { return enqueueDurable(ctx, tx, op, keyed, q.db.cfg.Now()) })
				if errors.Is(err, errKeyBusy) {
					op.busy = true // nothing written; the batch goes on without it
					return nil
				}
				return err
			}
			if keyed {
				// Per-key concurrency needs the key's count under its
				// lock: decided now, in the batch's transaction.
				err := shortWait(ctx, tx, func() error { return enqueueKeyed(ctx, tx, op, q.db.now()) })
				if errors.Is(err, errRetry) {
					op.retry = true // undone; the batch goes on without it
					return nil
				} else if errors.Is(err, errKeyBusy) {
					op.busy = true // nothing written; the batch goes on without it
					return nil
				}
				return err
			}
			tx.enq = append(tx.enq, op)
			return nil
		})
		if ctx.Err() != nil && err != nil {
			// Given up at the deadline: the batch may still commit this
			// delivery, so it is not answered as stored (503; the
			// sender's retry finds it by its identity), and op and d
			// are left alone: the writer may still be reading them.
			return touba.EnqueueResult{}, fmt.Errorf("queue commit: %w", err)
		}
		if err == nil && op.busy {
			// Another transaction holds the key (a node's batch now, or a
			// node frozen in one until the server ends its session):
			// asked again shortly, never waited on inside the batch, which
			// carries every other delivery. An identity taken meanwhile
			// (its holder committed) answers at once, from its entry:
			// many identical deliveries at once do not queue for its lock.
			if ex, ok := q.takenMeanwhile(ctx, d); ok {
				op.res, op.busy = ex, false
				break
			}
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 200*time.Millisecond)
				continue
			case <-ctx.Done():
				err = fmt.Errorf("key %q or a wait value of %s is locked by another transaction: %w", d.ConcKey, d.TriggerRef, ctx.Err())
			}
			break
		}
		if noPartition(err) && try < maxTries {
			// An id past the partitions created ahead: create them, and
			// try again (nothing of the batch was stored).
			if perr := q.db.ensureNow(ctx); perr == nil {
				continue
			}
		}
		// A deadlock with another node undid this delivery (op.retry) or
		// its whole batch (err): nothing of it was stored, try again.
		if !(op.retry || deadlocked(err)) || try == maxTries {
			break
		}
	}
	if err == nil && op.retry {
		err = errRetry
	}
	if err = errClosed(err); err != nil {
		if newID {
			d.QueueID = ""
		}
		return touba.EnqueueResult{}, fmt.Errorf("queue commit: %w", err)
	}
	q.batched.Add(1)
	if op.res.Created {
		n := int64(1)
		for _, r := range op.res.Routes {
			if r.Created {
				n++
			}
		}
		q.enqueued.Add(n)
		if d.Done {
			n--
		}
		q.pendingSeen.Add(n)
	} else {
		d.QueueID = ""
	}
	return op.res, nil
}

// newEntryID is a new queue id, of the node's clock (cfg.Now): the time
// partition it lands in is the one its clock names (history_partition.go).
func (d *db) newEntryID() string { return d.ids.New() }

// qEnqueue decides and inserts a batch of unkeyed deliveries in one
// statement, its identities locked (queue_identity.go): a delivery is inserted
// when no entry holds its identity, the first of the batch for each
// identity (the others, and those another transaction inserted meanwhile
// in the same partition, which its unique index refuses, are not), and
// the rows that were not inserted are joined to the entry holding their
// identity (as it was before the statement). That lookup is a LATERAL
// subquery with LIMIT (never flattened into a join) run only for those
// rows: as a plain join, with statistics older than a burst of intake (a
// table analyzed when nearly empty), the planner hashed a sequential scan
// of every entry for each batch, 1.7 ms a batch at 16,000 entries and
// growing with the table.
const qEnqueue = `WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::text[],
		$8::text[], $9::text[], $11::text[], $12::text[], $13::text[]) WITH ORDINALITY AS i(queue_id, trigger_ref, event_id, digest,
		body, headers, remote_addr, received_at, traceparent, program_digest, status, routing, n)),
ins AS (
	INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status,
		updated_at, traceparent, program_digest, routing)
	SELECT queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status, $10, traceparent,
		program_digest, NULLIF(routing, '')
	FROM (SELECT *, row_number() OVER (PARTITION BY trigger_ref, event_id ORDER BY n) AS r FROM input) i
	WHERE i.event_id = '' OR (i.r = 1 AND ` + noOtherEntry + `)
	ON CONFLICT DO NOTHING
	RETURNING queue_id)
SELECT i.queue_id, ins.queue_id IS NOT NULL, COALESCE(e.queue_id, ''), COALESCE(e.digest, ''), COALESCE(e.status, '')
FROM input i LEFT JOIN ins ON ins.queue_id = i.queue_id
LEFT JOIN LATERAL (SELECT x.queue_id, x.digest, x.status FROM touba.entries x
	WHERE ins.queue_id IS NULL AND x.trigger_ref = i.trigger_ref AND x.event_id = i.event_id AND x.event_id <> '' LIMIT 1) e ON true`

// flushEnqueues locks the identities of ops and runs qEnqueue for those
// it locked, and fills in each result; an op whose identity another
// transaction holds is left busy, unanswered (Enqueue asks again). q is
// a transaction when an op has an event id (the locks last to COMMIT).
func flushEnqueues(ctx context.Context, q querier, ops []*enqueueOp, now string) error {
	var keys []int32
	for _, o := range ops {
		keys = o.identityKeys(keys)
	}
	busy, err := tryLockIdentities(ctx, q, keys)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if len(busy) > 0 {
		free := make([]*enqueueOp, 0, len(ops))
		for _, o := range ops {
			if slices.ContainsFunc(o.identityKeys(nil), func(k int32) bool { return busy[k] }) {
				o.busy = true
				continue
			}
			free = append(free, o)
		}
		if ops = free; len(ops) == 0 {
			return nil
		}
	}
	if err := insertEnqueues(ctx, q, ops, now); err != nil {
		return err
	}
	if err := moveCursors(ctx, q, ops); err != nil {
		return err
	}
	if err := flushRoutes(ctx, q, ops, now); err != nil {
		return err
	}
	// Answers taken from entries already there wait, with this commit, for
	// the synchronous standby (durableBarrier); an entry inserted here
	// wrote WAL already, so its commit waits anyway.
	inserted := slices.ContainsFunc(ops, func(o *enqueueOp) bool { return o.res.Created })
	if !inserted && len(ops) > 0 {
		if _, err := q.Exec(ctx, durableBarrier); err != nil {
			return fmt.Errorf("enqueue: wait for the entries before it to be durable: %w", err)
		}
	}
	return nil
}

// insertEnqueues runs qEnqueue for ops, their identities locked, and
// fills in each result.
func insertEnqueues(ctx context.Context, q querier, ops []*enqueueOp, now string) error {
	n := len(ops)
	ids, refs, evs, digs, hdrs, addrs, recv, tps, progs := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	statuses, routings := make([]string, n), make([]string, n)
	bodies := make([][]byte, n)
	byID := make(map[string]*enqueueOp, n)
	for i, o := range ops {
		d := o.d
		ids[i], refs[i], evs[i], digs[i], hdrs[i] = d.QueueID, d.TriggerRef, d.EventID, d.Digest, o.headers
		addrs[i], recv[i], tps[i], progs[i] = d.RemoteAddr, touba.FormatTime(d.ReceivedAt), d.TraceParent, d.ProgramDigest
		statuses[i], routings[i] = touba.StatusPending, string(o.routing)
		if d.Done {
			statuses[i] = touba.StatusDone
		}
		bodies[i] = d.Body
		if bodies[i] == nil {
			bodies[i] = []byte{}
		}
		byID[d.QueueID] = o
	}
	rows, err := q.Query(ctx, qEnqueue, ids, refs, evs, digs, bodies, hdrs, addrs, recv, tps, now, progs, statuses, routings)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	for rows.Next() {
		var id string
		var r touba.EnqueueResult
		if err := rows.Scan(&id, &r.Created, &r.QueueID, &r.Digest, &r.Status); err != nil {
			rows.Close()
			return fmt.Errorf("enqueue: %w", err)
		}
		o := byID[id]
		if r.Created {
			r = touba.EnqueueResult{QueueID: id, Created: true, Digest: o.d.Digest, Status: touba.StatusPending}
			if o.d.Done {
				r.Status = touba.StatusDone
			}
		}
		o.res = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	// Not inserted and not found before the statement: the identity was
	// taken by an earlier delivery of this batch, or by another node's
	// transaction that committed while this one waited on it.
	created := map[[2]string]*enqueueOp{}
	for _, o := range ops {
		k := [2]string{o.d.TriggerRef, o.d.EventID}
		switch {
		case o.res.Created:
			if o.d.EventID != "" {
				created[k] = o
			}
		case o.res.QueueID != "":
		case created[k] != nil:
			first := created[k]
			o.res = touba.EnqueueResult{QueueID: first.d.QueueID, Digest: first.d.Digest, Status: first.res.Status}
		default:
			ex, ok, err := lookup(ctx, q, o.d)
			if err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("entry for %s/%s neither inserted nor found", o.d.TriggerRef, o.d.EventID)
			}
			o.res = ex
		}
	}
	return nil
}

// takenMeanwhile is the entry holding d's identity when one does now,
// committed, durable as intake's answers are (durableBarrier); ok is
// false when none does or the database did not answer.
func (q *Queue) takenMeanwhile(ctx context.Context, d *touba.Delivery) (touba.EnqueueResult, bool) {
	if d.EventID == "" {
		return touba.EnqueueResult{}, false
	}
	ex, ok, err := lookup(ctx, q.db.pool, d)
	if err != nil || !ok {
		return ex, false
	}
	if _, err := q.db.pool.Exec(ctx, durableBarrier); err != nil {
		return ex, false
	}
	return ex, true
}

// durableBarrier writes WAL, so that the commit of the statement (or the
// batch's transaction) waits until a synchronous standby has it, and with
// it everything committed before (SPEC §8: no delivery answered 202 is lost
// by a failover). An answer taken from an existing entry (duplicate,
// consumed, conflict) needs it: that entry may have committed on the
// primary alone (a commit whose wait for the standby was cut short by
// --database-timeout, answered 503), and a statement that inserts
// nothing writes no WAL, so its commit would not wait for the standby.
const durableBarrier = `UPDATE touba.meta SET value = value WHERE key = 'format'`

// lookup reads the entry holding d's identity.
func lookup(ctx context.Context, q querier, d *touba.Delivery) (touba.EnqueueResult, bool, error) {
	var ex touba.EnqueueResult
	err := q.QueryRow(ctx, `SELECT queue_id, digest, status FROM touba.entries WHERE trigger_ref = $1 AND event_id = $2 AND event_id <> ''`,
		d.TriggerRef, d.EventID).Scan(&ex.QueueID, &ex.Digest, &ex.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return ex, false, nil
	}
	return ex, err == nil, err
}
