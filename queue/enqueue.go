package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
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

type enqueueReq struct {
	d   *touba.Delivery
	res Result
	err error
	ch  chan struct{}
}

// Enqueue stores d durably unless its identity exists. It returns only
// after the batch holding d committed (or failed). d.QueueID and
// d.ReceivedAt are set by Enqueue when empty.
func (q *Queue) Enqueue(ctx context.Context, d *touba.Delivery) (Result, error) {
	r := &enqueueReq{d: d, ch: make(chan struct{})}
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		return Result{}, ErrClosed
	}
	q.reqs <- r
	q.mu.RUnlock()
	// Wait even if ctx ends: the entry may be committing, and the caller
	// must not answer before knowing.
	<-r.ch
	return r.res, r.err
}

func (q *Queue) writer() {
	defer close(q.done)
	batch := make([]*enqueueReq, 0, q.opts.MaxBatch)
	for r := range q.reqs {
		batch = append(batch[:0], r)
	drain:
		for len(batch) < q.opts.MaxBatch {
			select {
			case r, ok := <-q.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		q.commit(batch)
	}
}

// commit runs one batch in one transaction. A failed commit fails every
// request of the batch: none of them may be answered 202.
func (q *Queue) commit(batch []*enqueueReq) {
	ctx := context.Background()
	var added int64
	err := func() error {
		tx, err := q.db.Write.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		find, err := tx.PrepareContext(ctx, `SELECT queue_id, digest, status FROM entries WHERE trigger_ref = ? AND event_id = ? AND event_id != ''`)
		if err != nil {
			return err
		}
		defer find.Close()
		ins, err := tx.PrepareContext(ctx, `INSERT INTO entries
			(queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)`)
		if err != nil {
			return err
		}
		defer ins.Close()
		now := q.now()
		for _, r := range batch {
			r.res, r.err = Result{}, nil
			d := r.d
			if d.EventID != "" {
				var ex Result
				err := find.QueryRowContext(ctx, d.TriggerRef, d.EventID).Scan(&ex.QueueID, &ex.Digest, &ex.Status)
				if err == nil {
					r.res = ex
					continue
				} else if !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
			if q.pending.Load()+added >= q.opts.MaxPending {
				r.err = ErrFull
				continue
			}
			if d.QueueID == "" {
				d.QueueID = q.opts.NewID()
			}
			if d.ReceivedAt.IsZero() {
				d.ReceivedAt = q.opts.Now()
			}
			hdr, err := json.Marshal(d.Headers)
			if err != nil {
				return fmt.Errorf("encode headers: %w", err)
			}
			if d.Headers == nil {
				hdr = []byte("{}")
			}
			if _, err := ins.ExecContext(ctx, d.QueueID, d.TriggerRef, d.EventID, d.Digest, d.Body, string(hdr),
				d.RemoteAddr, touba.FormatTime(d.ReceivedAt), now); err != nil {
				return err
			}
			r.res = Result{QueueID: d.QueueID, Created: true, Digest: d.Digest, Status: touba.StatusPending}
			added++
		}
		return tx.Commit()
	}()
	if err != nil {
		err = fmt.Errorf("queue commit: %w", err)
		added = 0
	}
	q.pending.Add(added)
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
