package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Result is the writer's answer to one Enqueue. When Created is false the
// identity already had an entry: QueueID, Digest and Status are that
// entry's, read in the same transaction that would have inserted.
type Result struct {
	QueueID string
	Created bool
	Digest  string
	Status  string
}

// enqueueReq is one unit of the writer's work: an enqueue (d set) or a
// state change (op set), each answered after its batch committed.
type enqueueReq struct {
	d       *touba.Delivery
	headers string
	op      func(ctx context.Context, tx *sql.Tx) (pendingDelta int64, err error)
	res     Result
	err     error
	ch      chan struct{}
}

// submit hands r to the writer and waits for its batch.
func (q *Queue) submit(r *enqueueReq) error {
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		return ErrClosed
	}
	q.reqs <- r
	q.mu.RUnlock()
	// Wait even if the caller's context ends: the change may be
	// committing, and the caller must not act before knowing.
	<-r.ch
	return r.err
}

// Enqueue stores d durably unless its identity exists. It returns only
// after the batch holding d committed (or failed). d.QueueID and
// d.ReceivedAt are set by Enqueue when empty.
func (q *Queue) Enqueue(ctx context.Context, d *touba.Delivery) (Result, error) {
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
	r := &enqueueReq{d: d, headers: string(hdr), ch: make(chan struct{})}
	if err := q.submit(r); err != nil {
		return Result{}, err
	}
	return r.res, nil
}

func (q *Queue) writer() {
	defer close(q.done)
	// A thread of its own: the OS then shares the CPU between the writer
	// and the HTTP threads, instead of Go sharing one thread between the
	// writer and every request goroutine.
	runtime.LockOSThread()
	batch := make([]*enqueueReq, 0, q.opts.MaxBatch)
	for r := range q.reqs {
		batch = sqlitex.Gather(batch, r, q.reqs, q.opts.MaxBatch)
		q.commit(batch)
	}
}

// commit runs one batch in one transaction. A failed commit fails every
// request of the batch: none of them may be answered 202.
func (q *Queue) commit(batch []*enqueueReq) {
	ctx := context.Background()
	var added, moved int64 // new entries; pending moves by state changes
	err := func() error {
		tx, err := q.db.Write.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		ins, find, keyed := tx.StmtContext(ctx, q.insert), tx.StmtContext(ctx, q.find), tx.StmtContext(ctx, q.keyed)
		now := q.now()
		for _, r := range batch {
			r.res, r.err = Result{}, nil
			if r.op != nil {
				n, opErr, err := runOp(ctx, tx, r.op)
				if err != nil {
					return err // the transaction itself is gone: fail the batch
				}
				r.err = opErr
				moved += n
				continue
			}
			d := r.d
			if q.pending.Load()+added >= q.opts.MaxPending {
				// Full: a known identity still gets its true answer.
				if d.EventID != "" {
					if ex, ok, err := lookup(ctx, find, d); err != nil {
						return err
					} else if ok {
						r.res = ex
						continue
					}
				}
				r.err = ErrFull
				continue
			}
			if d.QueueID == "" {
				d.QueueID = q.opts.NewID()
			}
			// The insert is the identity decision: the partial unique index
			// refuses a second entry for (trigger_ref, event_id), so a new
			// delivery costs one statement and a known one two.
			held := false
			if d.ConcKey != "" && d.ConcMax > 0 {
				if held, err = heldAtEnqueue(ctx, keyed, d.TriggerRef, d.ConcKey, d.ConcMax); err != nil {
					return err
				}
			}
			res, err := ins.ExecContext(ctx, d.QueueID, d.TriggerRef, d.EventID, d.Digest, d.Body, r.headers,
				d.RemoteAddr, touba.FormatTime(d.ReceivedAt), now, d.TraceParent, d.ConcKey, d.ConcMax, held)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				r.res = Result{QueueID: d.QueueID, Created: true, Digest: d.Digest, Status: touba.StatusPending}
				added++
				continue
			}
			ex, ok, err := lookup(ctx, find, d)
			if err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("entry for %s/%s neither inserted nor found", d.TriggerRef, d.EventID)
			}
			d.QueueID = ""
			r.res = ex
		}
		return tx.Commit()
	}()
	if err != nil {
		err = fmt.Errorf("queue commit: %w", err)
		added, moved = 0, 0
	}
	q.pending.Add(added + moved)
	q.stats.Commits.Add(1)
	q.stats.Batched.Add(int64(len(batch)))
	q.stats.Enqueued.Add(added)
	for _, r := range batch {
		if err != nil {
			r.res, r.err = Result{}, err
		}
		close(r.ch)
	}
}

// runOp runs one state change inside the batch under a savepoint, so
// that its failure undoes only its own writes (sqlitex.Savepoint).
func runOp(ctx context.Context, tx *sql.Tx, op func(context.Context, *sql.Tx) (int64, error)) (n int64, opErr, fatal error) {
	opErr, fatal = sqlitex.Savepoint(ctx, tx, func() error {
		var err error
		n, err = op(ctx, tx)
		return err
	})
	if opErr != nil || fatal != nil {
		n = 0
	}
	return n, opErr, fatal
}

func lookup(ctx context.Context, find *sql.Stmt, d *touba.Delivery) (Result, bool, error) {
	var ex Result
	err := find.QueryRowContext(ctx, d.TriggerRef, d.EventID).Scan(&ex.QueueID, &ex.Digest, &ex.Status)
	if errors.Is(err, sql.ErrNoRows) {
		return ex, false, nil
	}
	return ex, err == nil, err
}
