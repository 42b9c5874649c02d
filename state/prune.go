package state

import (
	"context"
	"database/sql"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Prune applies the log's bounds now: rows older than LogMaxAge go, then the
// oldest rows past LogMaxRows, then the oldest stored bodies until their
// total is within LogMaxBodyBytes. The writer calls it periodically.
func (s *State) Prune(ctx context.Context) error {
	cutoff := touba.FormatTime(s.opts.Now().Add(-s.opts.LogMaxAge))
	return sqlitex.InTx(ctx, s.db.Write, func(tx *sql.Tx) error {
		var freed int64
		sum := func(q string, args ...any) error {
			var n sql.NullInt64
			if err := tx.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
				return err
			}
			freed += n.Int64
			return nil
		}
		if err := sum(`SELECT SUM(length(body)) FROM deliveries WHERE at < ? AND body IS NOT NULL`, cutoff); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE at < ?`, cutoff); err != nil {
			return err
		}
		var maxSeq sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM deliveries ORDER BY seq DESC LIMIT 1 OFFSET ?`, s.opts.LogMaxRows).Scan(&maxSeq)
		if err != nil && err != sql.ErrNoRows {
			return err
		}
		if maxSeq.Valid {
			if err := sum(`SELECT SUM(length(body)) FROM deliveries WHERE seq <= ? AND body IS NOT NULL`, maxSeq.Int64); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE seq <= ?`, maxSeq.Int64); err != nil {
				return err
			}
		}
		var total int64
		if err := tx.QueryRowContext(ctx, `SELECT value - ? FROM log_meta WHERE key = 'body_bytes'`, freed).Scan(&total); err != nil {
			return err
		}
		for total > s.opts.LogMaxBodyBytes {
			var seq, n int64
			err := tx.QueryRowContext(ctx, `SELECT seq, length(body) FROM deliveries WHERE body IS NOT NULL ORDER BY seq LIMIT 1`).Scan(&seq, &n)
			if err == sql.ErrNoRows {
				total = 0
				break
			} else if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET body = NULL WHERE seq = ?`, seq); err != nil {
				return err
			}
			total -= n
		}
		_, err = tx.ExecContext(ctx, `UPDATE log_meta SET value = ? WHERE key = 'body_bytes'`, total)
		return err
	})
}

func (s *State) prune() {
	if err := s.Prune(context.Background()); err != nil {
		s.opts.Log.Error().Err(err).Msg("delivery log prune failed")
	}
}
