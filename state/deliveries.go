package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

// Delivery is one row of the delivery log.
type Delivery = touba.LoggedDelivery

// Log queues one row for the writer without waiting. When the buffer is
// full the row is dropped and counted: acceptance must never wait on the
// log (SPEC §6).
func (s *State) Log(d *Delivery) {
	if d.DeliveryID == "" {
		d.DeliveryID = uuidv7.New()
	}
	if d.At.IsZero() {
		d.At = s.opts.Now()
	}
	// Rows waiting in the buffer hold their bodies in memory: past a cap
	// the row is still logged, without its body.
	held := int64(0)
	if d.BodyStored && len(d.Body) > 0 {
		held = int64(len(d.Body))
		if s.buffered.Add(held) > maxBufferedBodyBytes {
			s.buffered.Add(-held)
			held, d.Body, d.BodyStored = 0, nil, false
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.buffered.Add(-held)
		s.dropped.Add(1)
		return
	}
	select {
	case s.rows <- d:
	default:
		s.buffered.Add(-held)
		s.dropped.Add(1)
	}
}

// maxBufferedBodyBytes bounds the bodies of rows waiting to be written.
const maxBufferedBodyBytes = 64 << 20

// Flush waits until every row logged before the call is written.
func (s *State) Flush(ctx context.Context) error {
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

const maxLogBatch = 2048

func (s *State) logWriter() {
	defer close(s.done)
	tick := time.NewTicker(s.opts.PruneEvery)
	defer tick.Stop()
	batch := make([]*Delivery, 0, maxLogBatch)
	var ack chan struct{}
	for {
		batch, ack = batch[:0], nil
		select {
		case d, ok := <-s.rows:
			if !ok {
				return
			}
			batch = append(batch, d)
		case ack = <-s.flushes:
		case <-tick.C:
			s.prune()
			continue
		}
	drain:
		for len(batch) < maxLogBatch || ack != nil {
			select {
			case d, ok := <-s.rows:
				if !ok {
					break drain
				}
				batch = append(batch, d)
				if len(batch) >= maxLogBatch {
					s.write(batch)
					batch = batch[:0]
				}
			default:
				break drain
			}
		}
		s.write(batch)
		if ack != nil {
			close(ack)
		}
	}
}

func (s *State) write(batch []*Delivery) {
	if len(batch) == 0 {
		return
	}
	ctx := context.Background()
	var bodyBytes int64
	err := sqlitex.InTx(ctx, s.db.Write, func(tx *sql.Tx) error {
		ins, err := tx.PrepareContext(ctx, `INSERT INTO deliveries (delivery_id, at, trigger_ref, event_id, digest,
			status_code, error_code, queue_id, remote_addr, headers, body) VALUES (?,?,?,?,?,?,?,?,?,?,?)`)
		if err != nil {
			return err
		}
		defer ins.Close()
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
				bodyBytes += int64(len(d.Body))
			}
			if _, err := ins.ExecContext(ctx, d.DeliveryID, touba.FormatTime(d.At), d.TriggerRef, d.EventID, d.Digest,
				d.StatusCode, d.ErrorCode, d.QueueID, d.RemoteAddr, string(hdr), body); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE log_meta SET value = value + ? WHERE key = 'body_bytes'`, bodyBytes)
		return err
	})
	for _, d := range batch {
		if d.BodyStored {
			s.buffered.Add(-int64(len(d.Body)))
		}
	}
	if err != nil {
		s.dropped.Add(int64(len(batch)))
		s.opts.Log.Error().Err(err).Int("rows", len(batch)).Msg("delivery log write failed")
		return
	}
	s.written.Add(int64(len(batch)))
}
