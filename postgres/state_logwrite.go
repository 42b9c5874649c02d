package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	touba "github.com/touba/touba-trigger"
)

// Log queues one delivery-log row without waiting; a full buffer drops it.
func (s *State) Log(d *touba.LoggedDelivery) {
	if d.DeliveryID == "" {
		d.DeliveryID = s.db.newEntryID()
	}
	if d.At.IsZero() {
		d.At = s.db.cfg.Now()
	}
	d.Trim()
	if !d.BodyStored {
		d.Body = nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped.Add(1)
		return
	}
	held := heldBytes(d)
	if s.buffered.Add(held) > logBufferBytes {
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

// LogStats returns how many log rows were written and dropped.
func (s *State) LogStats() (written, dropped int64) { return s.written.Load(), s.dropped.Load() }

// Flush waits until every row logged before the call is written.
func (s *State) Flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case s.flushes <- ack:
	case <-s.done:
		return touba.ErrClosed
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

// Prune applies the log's bounds (count and age) now.
func (s *State) Prune(ctx context.Context) error {
	ack := make(chan error, 1)
	select {
	case s.prunes <- ack:
	case <-s.done:
		return touba.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-ack:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

const maxLogBatch = 2048

// logWriter writes the log in batches, one multi-row insert each, and
// prunes it every 30 seconds.
func (s *State) logWriter() {
	defer close(s.done)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	batch := make([]*touba.LoggedDelivery, 0, maxLogBatch)
	for {
		select {
		case d, ok := <-s.rows:
			if !ok {
				return
			}
			batch = append(batch[:0], d)
			open := s.gather(&batch)
			s.write(batch)
			if !open {
				return
			}
		case ack := <-s.flushes:
			for {
				batch = batch[:0]
				open := s.gather(&batch)
				s.write(batch)
				if len(batch) == 0 || !open {
					break
				}
			}
			close(ack)
		case ack := <-s.prunes:
			ack <- s.prune()
		case <-tick.C:
			s.prune()
		}
	}
}

// gather adds the rows waiting now to batch, up to maxLogBatch; false
// when the buffer was closed.
func (s *State) gather(batch *[]*touba.LoggedDelivery) bool {
	for len(*batch) < maxLogBatch {
		select {
		case d, ok := <-s.rows:
			if !ok {
				return false
			}
			*batch = append(*batch, d)
		default:
			return true
		}
	}
	return true
}

// write inserts batch with one statement. When the database refuses the
// data of a row (SQLSTATE class 22 or 23: a byte a text column cannot hold,
// a delivery id logged twice), the batch is split in halves and each half
// written on its own, down to the one row refused: that row is dropped
// and counted, never the others of its batch. Any other error (the
// database unreachable) drops the batch as it is, without a retry per row.
func (s *State) write(batch []*touba.LoggedDelivery) {
	// The rows leave the buffer's byte account once, whatever becomes of
	// them (written, split, dropped).
	var held int64
	for _, d := range batch {
		held += heldBytes(d)
	}
	defer s.buffered.Add(-held)
	s.writeRows(batch)
}

// writeRows is write without the buffer's accounting: the recursion.
func (s *State) writeRows(batch []*touba.LoggedDelivery) {
	if len(batch) == 0 {
		return
	}
	n := len(batch)
	err := s.insertLog(batch)
	if noPartition(err) {
		// A delivery id past the partitions made ahead: make them.
		ctx, cancel := s.db.bounded(context.Background())
		if err = s.db.ensureNow(ctx); err == nil {
			err = s.insertLog(batch)
		}
		cancel()
	}
	if err == nil {
		s.written.Add(int64(n))
		return
	}
	if n > 1 && dataError(err) {
		s.writeRows(batch[:n/2])
		s.writeRows(batch[n/2:])
		return
	}
	s.dropped.Add(int64(n))
	ev := s.db.log.Error().Err(err).Int("rows", n)
	if n == 1 {
		ev = ev.Str("delivery_id", batch[0].DeliveryID)
	}
	ev.Msg("delivery log write failed")
}

// dataError reports whether err is the database refusing the data of a
// statement (data exception or integrity constraint violation).
func dataError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23"))
}

func (s *State) insertLog(batch []*touba.LoggedDelivery) error {
	n := len(batch)
	cols := make([][]string, 10)
	for i := range cols {
		cols[i] = make([]string, n)
	}
	codes := make([]int32, n)
	bodies := make([][]byte, n)
	sizes := make([]int64, n)
	for i, d := range batch {
		hdr := []byte("{}")
		if d.Headers != nil {
			hdr, _ = json.Marshal(d.Headers)
		}
		sizes[i] = storedSize(d, touba.FormatTime(d.At), hdr)
		for c, v := range []string{d.DeliveryID, touba.FormatTime(d.At), d.TriggerRef, d.EventID, d.Digest, d.ErrorCode,
			d.QueueID, d.RemoteAddr, string(hdr)} {
			cols[c][i] = v
		}
		codes[i] = int32(d.StatusCode)
		if d.BodyStored {
			bodies[i] = d.Body
			if bodies[i] == nil {
				bodies[i] = []byte{}
			}
		}
	}
	return errClosed(s.db.w.Do(context.Background(), func(ctx context.Context, tx *Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO touba.deliveries (delivery_id, at, trigger_ref, event_id, digest, error_code, queue_id,
			remote_addr, headers, status_code, body, size)
			SELECT delivery_id, at, trigger_ref, event_id, digest, error_code, queue_id, remote_addr, headers, status_code, body, size
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
				$10::int[], $11::bytea[], $12::bigint[]) WITH ORDINALITY
				AS r(delivery_id, at, trigger_ref, event_id, digest, error_code, queue_id, remote_addr, headers, status_code, body, size, n)
			ORDER BY n`, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], cols[8], codes, bodies, sizes)
		return err
	}))
}

// prune deletes rows past LogMaxAge, then the oldest past LogMaxRows,
// then applies the byte bounds (pruneBytes).
func (s *State) prune() error {
	cutoff := touba.FormatTime(s.db.cfg.Now().Add(-s.db.cfg.LogMaxAge))
	err := errClosed(s.db.w.Do(context.Background(), func(ctx context.Context, tx *Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM touba.deliveries WHERE at < $1`, cutoff); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM touba.deliveries WHERE seq <= (SELECT seq FROM touba.deliveries ORDER BY seq DESC
			OFFSET $1 LIMIT 1)`, s.db.cfg.LogMaxRows); err != nil {
			return err
		}
		return s.pruneBytes(ctx, tx)
	}))
	if err != nil {
		s.db.log.Error().Err(err).Msg("delivery log prune failed")
	}
	return err
}
