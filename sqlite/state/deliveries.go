package state

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

// Delivery is one row of the delivery log.
type Delivery = touba.LoggedDelivery

// waiting is a row in the buffer, with the bytes it holds there.
type waiting struct {
	*Delivery
	held int64
}

// Log queues one row for the writer without waiting. The fields a sender
// controls are cut to their caps first (limits.go). When the buffer is
// full, in rows or in bytes, the row is dropped and counted: acceptance
// must never wait on the log (SPEC §6).
func (s *State) Log(d *Delivery) {
	if d.DeliveryID == "" {
		d.DeliveryID = uuidv7.New()
	}
	if d.At.IsZero() {
		d.At = s.opts.Now()
	}
	d.Trim()
	if !d.BodyStored {
		d.Body = nil
	}
	// Rows waiting in the buffer hold memory: past the byte cap a row is
	// still logged without its body if that fits, else dropped.
	w := &waiting{Delivery: d, held: heldBytes(d) + int64(len(d.Body))}
	if n := s.buffered.Add(w.held); n > s.opts.LogBufferBytes {
		body := int64(len(d.Body))
		if body == 0 || n-body > s.opts.LogBufferBytes {
			s.buffered.Add(-w.held)
			s.dropped.Add(1)
			return
		}
		s.buffered.Add(-body)
		w.held -= body
		d.Body, d.BodyStored = nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.buffered.Add(-w.held)
		s.dropped.Add(1)
		return
	}
	select {
	case s.rows <- w:
	default:
		s.buffered.Add(-w.held)
		s.dropped.Add(1)
	}
}

// Flush waits until every row logged before the call is written.
func (s *State) Flush(ctx context.Context) error {
	if s.w == nil {
		return nil // read-only: nothing is ever logged
	}
	ack := make(chan struct{})
	select {
	case s.flushes <- ack:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A write transaction takes at most this many rows or bytes, so that one
// commit (and the WAL it grows) stays small even under a flood.
const (
	maxLogBatch      = 2048
	maxLogBatchBytes = 4 << 20
)

func (s *State) write(batch []*waiting) {
	if len(batch) == 0 {
		return
	}
	ctx := context.Background()
	t, ageDone := s.totals, false
	// Through the file's commit engine: a batch of the log is one operation
	// among the run checkpoints'.
	refused := 0
	err := s.w.Do(ctx, func(ctx context.Context, tx *sqlitex.Tx) error {
		var err error
		refused = 0
		for _, d := range batch {
			hdr, _ := json.Marshal(d.Headers)
			if d.Headers == nil {
				hdr = []byte("{}")
			}
			var body any
			if d.BodyStored {
				body = d.Body
				if d.Body == nil {
					body = []byte{}
				}
			}
			at := touba.FormatTime(d.At)
			size := storedSize(d.Delivery, at, hdr)
			if _, err := tx.ExecContext(ctx, qInsertLog, d.DeliveryID, at, d.TriggerRef, d.EventID, d.Digest,
				d.StatusCode, d.ErrorCode, d.QueueID, d.RemoteAddr, string(hdr), body, size); err != nil {
				// A row the schema refuses (a delivery id logged twice)
				// undoes only its own statement: it is dropped, never
				// the other rows of its batch.
				if !constraintError(err) {
					return err
				}
				refused++
				s.opts.Log.Error().Err(err).Str("delivery_id", d.DeliveryID).Msg("delivery log row refused")
				continue
			}
			if d.BodyStored {
				t.body += int64(len(d.Body))
			}
			t.rows++
			t.bytes += size
		}
		// Make room in the same transaction: a flood's inserts and the
		// pruning they call for go in step, in small batches.
		if s.pruneDue(t) {
			if t, ageDone, err = s.pruneStep(ctx, tx, t, 2*len(batch)); err != nil {
				return err
			}
		}
		return t.save(ctx, tx)
	})
	for _, d := range batch {
		s.buffered.Add(-d.held)
	}
	if err != nil {
		s.dropped.Add(int64(len(batch)))
		s.opts.Log.Error().Err(err).Int("rows", len(batch)).Msg("delivery log write failed")
		return
	}
	s.totals = t
	if ageDone {
		s.ageDue = false
	}
	s.dropped.Add(int64(refused))
	s.written.Add(int64(len(batch) - refused))
}

// constraintError reports whether err is SQLite refusing one statement's
// row (SQLITE_CONSTRAINT), which undoes that statement only.
func constraintError(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrConstraint
}

const qInsertLog = `INSERT INTO deliveries (delivery_id, at, trigger_ref, event_id, digest,
	status_code, error_code, queue_id, remote_addr, headers, body, size) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`
