package state

import (
	"context"
	"errors"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

var errClosed = errors.New("state: closed")

// logTotals are the delivery log's running totals, kept in log_meta in
// the same transaction as every change, so no bound needs a table scan.
type logTotals struct {
	rows  int64 // rows in the table
	bytes int64 // their counted sizes (storedSize), bodies included
	body  int64 // bytes of stored bodies
}

func loadTotals(ctx context.Context, db *sqlitex.DB) (logTotals, error) {
	var t logTotals
	err := db.Write.QueryRowContext(ctx, `SELECT
		(SELECT value FROM log_meta WHERE key = 'rows'),
		(SELECT value FROM log_meta WHERE key = 'row_bytes'),
		(SELECT value FROM log_meta WHERE key = 'body_bytes')`).Scan(&t.rows, &t.bytes, &t.body)
	return t, err
}

func (t logTotals) save(ctx context.Context, tx *sqlitex.Tx) error {
	_, err := tx.ExecContext(ctx, `UPDATE log_meta SET value = CASE key
		WHEN 'rows' THEN ? WHEN 'row_bytes' THEN ? WHEN 'body_bytes' THEN ? ELSE value END`, t.rows, t.bytes, t.body)
	return err
}

// pruneBatch is the most rows one prune step deletes (or strips of their
// body) when it runs on its own: a few milliseconds of the writer.
const pruneBatch = 512

// pruneDue reports whether totals t break a bound, or an age check is due.
func (s *State) pruneDue(t logTotals) bool {
	if s.pruneFailed {
		return false
	}
	return s.ageDue || t.rows > s.opts.LogMaxRows || t.bytes > s.opts.LogMaxBytes || t.body > s.opts.LogMaxBodyBytes
}

// pruneStep deletes the oldest rows, at most limit of them (at least
// pruneBatch), while a bound is broken (rows past LogMaxRows, bytes past
// LogMaxBytes, or, when an age check is due, rows older than LogMaxAge),
// then strips the oldest stored bodies, at most limit of them, while
// their total is past LogMaxBodyBytes. It returns the totals after, and
// whether the age check is complete.
func (s *State) pruneStep(ctx context.Context, tx *sqlitex.Tx, t logTotals, limit int) (logTotals, bool, error) {
	if limit < pruneBatch {
		limit = pruneBatch
	}
	age := s.ageDue
	cutoff := touba.FormatTime(s.opts.Now().Add(-s.opts.LogMaxAge))
	over := func() bool { return t.rows > s.opts.LogMaxRows || t.bytes > s.opts.LogMaxBytes }
	ageDone := true
	if age || over() {
		rows, err := tx.QueryContext(ctx, `SELECT seq, at, size, coalesce(length(body), 0) FROM deliveries ORDER BY seq LIMIT ?`, limit)
		if err != nil {
			return t, false, err
		}
		var last int64 = -1
		n := 0
		for rows.Next() {
			var seq, size, body int64
			var at string
			if err := rows.Scan(&seq, &at, &size, &body); err != nil {
				rows.Close()
				return t, false, err
			}
			if !over() && !(age && at < cutoff) {
				break
			}
			last, n = seq, n+1
			t.rows, t.bytes, t.body = t.rows-1, t.bytes-size, t.body-body
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return t, false, err
		}
		ageDone = n < limit
		if last >= 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE seq <= ?`, last); err != nil {
				return t, false, err
			}
		}
	}
	if t.body > s.opts.LogMaxBodyBytes {
		rows, err := tx.QueryContext(ctx, `SELECT seq, length(body) FROM deliveries WHERE body IS NOT NULL ORDER BY seq LIMIT ?`, limit)
		if err != nil {
			return t, false, err
		}
		var last int64 = -1
		n := 0
		for rows.Next() && t.body > s.opts.LogMaxBodyBytes {
			var seq, body int64
			if err := rows.Scan(&seq, &body); err != nil {
				rows.Close()
				return t, false, err
			}
			last, n = seq, n+1
			t.bytes, t.body = t.bytes-body, t.body-body
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return t, false, err
		}
		if n == 0 {
			// No body left although the total says so: the total drifted
			// (it cannot go below what is stored), start it over.
			t.body = 0
		}
		if last >= 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET size = size - length(body), body = NULL
				WHERE body IS NOT NULL AND seq <= ?`, last); err != nil {
				return t, false, err
			}
		}
	}
	if t.rows <= 0 {
		// An empty table holds nothing, whatever the totals drifted to.
		t = logTotals{}
	}
	return t, ageDone, nil
}

// pruneOnce runs one prune step in its own transaction.
func (s *State) pruneOnce() error {
	ctx := context.Background()
	t, ageDone := s.totals, false
	err := s.w.Do(ctx, func(ctx context.Context, tx *sqlitex.Tx) error {
		var err error
		if t, ageDone, err = s.pruneStep(ctx, tx, t, pruneBatch); err != nil {
			return err
		}
		return t.save(ctx, tx)
	})
	if err != nil {
		// Not retried at once (the writer would spin on it): the next
		// tick tries again.
		s.opts.Log.Error().Err(err).Msg("delivery log prune failed")
		s.pruneFailed = true
		return err
	}
	s.totals = t
	if ageDone {
		s.ageDue = false
	}
	return nil
}

// pruneAll runs prune steps, age check included, until every bound holds.
func (s *State) pruneAll() error {
	s.ageDue, s.pruneFailed = true, false
	for s.pruneDue(s.totals) {
		if err := s.pruneOnce(); err != nil {
			return err
		}
	}
	return nil
}
