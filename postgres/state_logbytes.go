package postgres

import (
	"context"

	touba "github.com/touba/touba-trigger"
)

// The delivery log's byte bounds, as on SQLite (sqlite/state/limits.go):
// a row counts every column as written plus rowOverhead; the oldest rows
// go first past LogMaxBytes, the oldest stored bodies past
// LogMaxBodyBytes. Rows waiting for the log's writer are bounded in bytes
// too (logBufferBytes), not only in number.

// rowOverhead approximates a row's cost beyond its column bytes (tuple
// header, seq, status code, index entries).
const rowOverhead = 160

// logBufferBytes bounds the bytes of the rows waiting for the writer:
// past it a row is dropped and counted, like one past logBuffer.
const logBufferBytes = 64 << 20

// storedSize is what a row counts against LogMaxBytes.
func storedSize(d *touba.LoggedDelivery, at string, headersJSON []byte) int64 {
	n := int64(len(d.DeliveryID)+len(at)+len(d.TriggerRef)+len(d.EventID)+len(d.Digest)+len(d.ErrorCode)+
		len(d.QueueID)+len(d.RemoteAddr)+len(headersJSON)) + rowOverhead
	if d.BodyStored {
		n += int64(len(d.Body))
	}
	return n
}

// heldBytes approximates the memory a buffered row holds.
func heldBytes(d *touba.LoggedDelivery) int64 {
	n := int64(len(d.DeliveryID)+len(d.TriggerRef)+len(d.EventID)+len(d.Digest)+len(d.ErrorCode)+
		len(d.QueueID)+len(d.RemoteAddr)+len(d.Body)) + 256
	for k, v := range d.Headers {
		n += int64(len(k)+len(v)) + 64
	}
	return n
}

// pruneBytes deletes the oldest rows while the log's counted bytes are
// past LogMaxBytes, then drops the oldest stored bodies while theirs are
// past LogMaxBodyBytes: each one statement over a running total from the
// newest row back.
func (s *State) pruneBytes(ctx context.Context, tx *Tx) error {
	if _, err := tx.Exec(ctx, `DELETE FROM touba.deliveries WHERE seq <= (
		SELECT seq FROM (SELECT seq, SUM(size) OVER (ORDER BY seq DESC) AS total FROM touba.deliveries) t
		WHERE total > $1 ORDER BY seq DESC LIMIT 1)`, s.db.cfg.LogMaxBytes); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE touba.deliveries SET size = size - octet_length(body), body = NULL
		WHERE body IS NOT NULL AND seq <= (
		SELECT seq FROM (SELECT seq, SUM(octet_length(body)) OVER (ORDER BY seq DESC) AS total
			FROM touba.deliveries WHERE body IS NOT NULL) t
		WHERE total > $1 ORDER BY seq DESC LIMIT 1)`, s.db.cfg.LogMaxBodyBytes)
	return err
}
