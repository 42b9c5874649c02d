package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Result is the writer's answer to one Enqueue. When Created is false the
// identity already had an entry: QueueID, Digest and Status are that
// entry's, read in the same transaction that would have inserted.
type Result = touba.EnqueueResult

// op is a state change run by the writer: it returns how the pending
// count moves when it commits.
type op func(ctx context.Context, tx *sqlitex.Tx) (pendingDelta int64, err error)

// change runs op in the writer's next batch, under its own savepoint, and
// waits for the batch. It waits even if the caller's context ends: the
// change may be committing, and the caller must not act before knowing.
func (q *Queue) change(o op) error {
	if q.w == nil {
		return sqlitex.ErrReadOnly
	}
	return q.closedErr(q.w.Do(context.Background(), func(ctx context.Context, tx *sqlitex.Tx) error {
		n, err := o(ctx, tx)
		if err == nil {
			q.batchMoved += n
		}
		return err
	}))
}

// guarded is change for an op of one guarded statement, without a
// savepoint (two statements fewer): op must return its own error wrapped in
// commit.Refused and only when it wrote nothing (the guard matched no row);
// any other error fails the whole batch (see commit.Writer.DoShared).
func (q *Queue) guarded(o op) error {
	if q.w == nil {
		return sqlitex.ErrReadOnly
	}
	return q.closedErr(q.w.DoShared(context.Background(), func(ctx context.Context, tx *sqlitex.Tx) error {
		n, err := o(ctx, tx)
		if err == nil {
			q.batchMoved += n
		}
		return err
	}))
}

func (q *Queue) closedErr(err error) error {
	if errors.Is(err, commit.ErrClosed) {
		return ErrClosed
	} else if err != nil {
		return fmt.Errorf("queue commit: %w", err)
	}
	return nil
}

// Enqueue stores d durably unless its identity exists. It returns only
// after the batch holding d committed (or failed). d.QueueID and
// d.ReceivedAt are set by Enqueue when empty.
func (q *Queue) Enqueue(ctx context.Context, d *touba.Delivery) (Result, error) {
	if q.w == nil {
		return Result{}, sqlitex.ErrReadOnly
	}
	// Encode outside the writer: its goroutine is the bottleneck.
	hdr := []byte("{}")
	if d.Headers != nil {
		var err error
		if hdr, err = json.Marshal(d.Headers); err != nil {
			return Result{}, fmt.Errorf("encode headers: %w", err)
		}
	}
	if d.ReceivedAt.IsZero() {
		d.ReceivedAt = q.opts.Now()
	}
	if d.Gather != nil {
		// Refused here, not in the writer: an error there fails the batch.
		if err := d.Gather.Check(); err != nil {
			return Result{}, err
		}
	}
	// Keys over touba.MaxKeyBytes are refused here too, as on PostgreSQL
	// (where the index would refuse them in the batch), though SQLite's
	// indexes would take them: a program behaves alike on both.
	if err := d.CheckKeys(); err != nil {
		return Result{}, err
	}
	for _, r := range d.Routes {
		if err := checkRoute(r); err != nil {
			return Result{}, err
		}
	}
	var routing []byte
	var routes [][]byte
	if len(d.Routes) > 0 || d.Routing != nil {
		// Its routes' ids and what each entry records, outside the writer
		// (its goroutine is the bottleneck); d's id with them.
		if d.QueueID == "" {
			d.QueueID = q.opts.NewID()
		}
		routing, routes = touba.RoutingOf(d, q.opts.NewID)
	}
	var res Result
	var refused error
	// Shared, not isolated: the hot path costs one statement, and an error
	// here is the transaction's, which fails the batch.
	err := q.w.DoShared(context.Background(), func(ctx context.Context, tx *sqlitex.Tx) error {
		var err error
		res, refused, err = q.enqueueTx(ctx, tx, d, string(hdr), routing, routes)
		return err
	})
	if err = q.closedErr(err); err != nil {
		return Result{}, err
	} else if refused != nil {
		return Result{}, refused
	}
	return res, nil
}

// enqueueTx is the identity decision and the insert, in the writer's batch.
func (q *Queue) enqueueTx(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery, headers string, routing []byte, routes [][]byte) (Result, error, error) {
	if q.pending.Load()+q.batchAdded+pendingNeed(d) > q.opts.MaxPending {
		// Full: a known identity still gets its true answer.
		if d.EventID != "" {
			if ex, ok, err := lookup(ctx, tx, d); err != nil {
				return Result{}, nil, err
			} else if ok {
				return ex, nil, nil
			}
		}
		return Result{}, ErrFull, nil
	}
	if d.QueueID == "" {
		d.QueueID = q.opts.NewID()
	}
	r, created, err := q.insertTx(ctx, tx, d, headers, routing)
	if err != nil {
		return Result{}, nil, err
	}
	if created {
		if err := moveCursor(ctx, tx, d); err != nil {
			return Result{}, nil, err
		}
		// Its routes' entries, in this transaction (SPEC §2.4): all of
		// them commit with it, or none does.
		if len(d.Routes) > 0 {
			crashpoint.Hit(CrashRoutesBetween)
			if err := q.routesTx(ctx, tx, d, headers, routes, &r); err != nil {
				return Result{}, nil, err
			}
		}
		return r, nil, nil
	}
	ex, ok, err := lookup(ctx, tx, d)
	if err != nil {
		return Result{}, nil, err
	} else if !ok {
		return Result{}, nil, fmt.Errorf("entry for %s/%s neither inserted nor found", d.TriggerRef, d.EventID)
	}
	// A tick already there (a restart, or an entry the previous release
	// wrote, with no cursor) moves the cursor as well.
	if err := moveCursor(ctx, tx, d); err != nil {
		return Result{}, nil, err
	}
	d.QueueID = ""
	return ex, nil, nil
}

// insertTx inserts d unless its identity exists, and applies what a new
// entry carries (its offers, cancels and gathering). The insert is the
// identity decision: the partial unique index refuses a second entry for
// (trigger_ref, event_id), so a new delivery costs one statement and a
// known one two.
func (q *Queue) insertTx(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery, headers string, routing []byte) (Result, bool, error) {
	held := false
	if d.ConcKey != "" && d.ConcMax > 0 {
		var err error
		if held, err = heldAtEnqueue(ctx, tx, d.TriggerRef, d.ConcKey, d.ConcMax); err != nil {
			return Result{}, false, err
		}
	}
	status := touba.StatusPending
	if d.Done {
		status = touba.StatusDone
	}
	res, err := tx.ExecContext(ctx, qInsert, d.QueueID, d.TriggerRef, d.EventID, d.Digest, d.Body, headers,
		d.RemoteAddr, touba.FormatTime(d.ReceivedAt), status, q.batchTime(), d.TraceParent, d.ConcKey, d.ConcMax, held,
		d.ProgramDigest, string(routing))
	if err != nil {
		return Result{}, false, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Result{}, false, nil
	}
	if d.Done {
		q.batchDone++
	} else {
		q.batchAdded++
	}
	r := Result{QueueID: d.QueueID, Created: true, Digest: d.Digest, Status: status}
	// Durable steps (offers.go): nothing at all to do, and no statement
	// run, for a delivery that carries no match values.
	if len(d.Offers) > 0 || len(d.Cancels) > 0 || len(d.CancelKeys) > 0 {
		if err := q.applyMatches(ctx, tx, d, &r); err != nil {
			return Result{}, false, err
		}
	}
	if d.Gather != nil {
		if err := q.gather(ctx, tx, d, &r); err != nil {
			return Result{}, false, fmt.Errorf("gather %s: %w", d.QueueID, err)
		}
	}
	return r, true, nil
}

// routesTx inserts the entries of d's routes (routing: what each
// records), d's entry being new, and says in r what each did. A route
// whose identity an entry holds already is not fed: d's routing says so.
func (q *Queue) routesTx(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery, headers string, routing [][]byte, r *Result) error {
	r.Routes = make([]Result, len(d.Routes))
	held := false
	for i, rd := range d.Routes {
		rr, created, err := q.insertTx(ctx, tx, rd, headers, routing[i])
		if err != nil {
			return fmt.Errorf("route %s: %w", rd.TriggerRef, err)
		}
		if !created {
			ex, ok, err := lookup(ctx, tx, rd)
			if err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("entry for %s/%s neither inserted nor found", rd.TriggerRef, rd.EventID)
			}
			rr = ex
			d.Routing.Held(rd.TriggerRef, ex.QueueID)
			held = true
		}
		r.Routes[i] = rr
	}
	if held {
		if _, err := tx.ExecContext(ctx, `UPDATE entries SET routing = ? WHERE queue_id = ?`, string(d.Routing.JSON()), d.QueueID); err != nil {
			return err
		}
	}
	return nil
}

// checkRoute refuses, before the writer (where an error fails the
// batch), a route's delivery the writer would refuse.
func checkRoute(r *touba.Delivery) error {
	if r.Gather != nil {
		if err := r.Gather.Check(); err != nil {
			return err
		}
	}
	return r.CheckKeys()
}

// onBatch runs in the writer after each batch: the pending count moves
// only by what committed.
func (q *Queue) onBatch(_ int, _ time.Duration, err error) {
	if err == nil {
		q.pending.Add(q.batchAdded + q.batchMoved)
		q.enqueued.Add(q.batchAdded + q.batchDone)
	}
	q.batchAdded, q.batchMoved, q.batchDone, q.batchNow = 0, 0, 0, ""
}

// batchTime is the time of the batch being written, formatted once for
// all its enqueues (the writer's CPU is what delays the next fsync).
func (q *Queue) batchTime() string {
	if q.batchNow == "" {
		q.batchNow = q.now()
	}
	return q.batchNow
}

const (
	qInsert = `INSERT INTO entries
		(queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status, updated_at, traceparent,
		 conc_key, conc_max, held, first_token, program_digest, routing)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?, 1, ?, NULLIF(?, ''))
		ON CONFLICT (trigger_ref, event_id) WHERE event_id != '' DO NOTHING`
	qFind = `SELECT queue_id, digest, status FROM entries WHERE trigger_ref = ? AND event_id = ? AND event_id != ''`
)

func lookup(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery) (Result, bool, error) {
	var ex Result
	err := tx.QueryRowContext(ctx, qFind, d.TriggerRef, d.EventID).Scan(&ex.QueueID, &ex.Digest, &ex.Status)
	if errors.Is(err, sql.ErrNoRows) {
		return ex, false, nil
	}
	return ex, err == nil, err
}

// CrashRoutesBetween is the crash point (internal/crashpoint) inside
// intake's transaction, after an accepting trigger's new entry and before
// its routes' entries (SPEC §2.4): nothing of the batch is on disk.
const CrashRoutesBetween = "routes-between"

// pendingNeed is how many pending entries d may add: its own (unless it
// is stored done) and its routes', at least one.
func pendingNeed(d *touba.Delivery) int64 {
	n := int64(len(d.Routes))
	if !d.Done {
		n++
	}
	return max(n, 1)
}
