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
	var res Result
	var refused error
	// Shared, not isolated: the hot path costs one statement, and an error
	// here is the transaction's, which fails the batch.
	err := q.w.DoShared(context.Background(), func(ctx context.Context, tx *sqlitex.Tx) error {
		var err error
		res, refused, err = q.enqueueTx(ctx, tx, d, string(hdr))
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
func (q *Queue) enqueueTx(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery, headers string) (Result, error, error) {
	if q.pending.Load()+q.batchAdded >= q.opts.MaxPending {
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
	// The insert is the identity decision: the partial unique index refuses
	// a second entry for (trigger_ref, event_id), so a new delivery costs
	// one statement and a known one two.
	held := false
	if d.ConcKey != "" && d.ConcMax > 0 {
		var err error
		if held, err = heldAtEnqueue(ctx, tx, d.TriggerRef, d.ConcKey, d.ConcMax); err != nil {
			return Result{}, nil, err
		}
	}
	res, err := tx.ExecContext(ctx, qInsert, d.QueueID, d.TriggerRef, d.EventID, d.Digest, d.Body, headers,
		d.RemoteAddr, touba.FormatTime(d.ReceivedAt), q.batchTime(), d.TraceParent, d.ConcKey, d.ConcMax, held, d.ProgramDigest)
	if err != nil {
		return Result{}, nil, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		q.batchAdded++
		r := Result{QueueID: d.QueueID, Created: true, Digest: d.Digest, Status: touba.StatusPending}
		// Durable steps (offers.go): nothing at all to do, and no statement
		// run, for a delivery that carries no match values.
		if len(d.Offers) > 0 || len(d.Cancels) > 0 || len(d.CancelKeys) > 0 {
			if err := q.applyMatches(ctx, tx, d, &r); err != nil {
				return Result{}, nil, err
			}
		}
		if d.Gather != nil {
			if err := q.gather(ctx, tx, d, &r); err != nil {
				return Result{}, nil, fmt.Errorf("gather %s: %w", d.QueueID, err)
			}
		}
		if err := moveCursor(ctx, tx, d); err != nil {
			return Result{}, nil, err
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

// onBatch runs in the writer after each batch: the pending count moves
// only by what committed.
func (q *Queue) onBatch(_ int, _ time.Duration, err error) {
	if err == nil {
		q.pending.Add(q.batchAdded + q.batchMoved)
		q.enqueued.Add(q.batchAdded)
	}
	q.batchAdded, q.batchMoved, q.batchNow = 0, 0, ""
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
		 conc_key, conc_max, held, first_token, program_digest)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, NULLIF(?, ''), ?, ?, 1, ?)
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
