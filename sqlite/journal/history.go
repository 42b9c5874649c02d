package journal

import (
	"context"
	"encoding/json"
	"fmt"
)

// Unsettled returns, of the scopes (queue ids), those with an effect not
// settled: prepared, dispatched or unknown. --history never forgets such
// an entry (SPEC §8.1): an operator has to settle it first.
func (j *Journal) Unsettled(ctx context.Context, scopes []string) (map[string]bool, error) {
	list, err := json.Marshal(scopes)
	if err != nil {
		return nil, err
	}
	rows, err := j.db.Read.QueryContext(ctx, `SELECT DISTINCT scope FROM effects
		WHERE scope IN (SELECT value FROM json_each(?1)) AND state IN ('prepared', 'dispatched', 'unknown')`, string(list))
	if err != nil {
		return nil, fmt.Errorf("unsettled effects: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("unsettled effects: %w", err)
		}
		out[s] = true
	}
	return out, rows.Err()
}

// Forget deletes the effects of the forgotten entries scopes and their
// audit events, in one transaction of the writer, and returns how many
// effects went. effect_events refuses any other delete: its trigger lets a
// row go only while its scope is in forgetting, which this fills and
// empties in the same transaction.
func (j *Journal) Forget(ctx context.Context, scopes []string) (int64, error) {
	list, err := json.Marshal(scopes)
	if err != nil {
		return 0, err
	}
	var n int64
	err = j.submit(ctx, func(ctx context.Context, tx *wtx) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO forgetting (scope) SELECT value FROM json_each(?1)`, string(list)); err != nil {
			return fmt.Errorf("forget effects: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM effect_events WHERE scope IN (SELECT scope FROM forgetting)`); err != nil {
			return fmt.Errorf("forget effect events: %w", err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM effects WHERE scope IN (SELECT scope FROM forgetting)`)
		if err != nil {
			return fmt.Errorf("forget effects: %w", err)
		}
		n, _ = res.RowsAffected()
		_, err = tx.ExecContext(ctx, `DELETE FROM forgetting`)
		return err
	})
	return n, err
}

// Size is the journal file's size on disk (with its WAL) and its free
// pages.
func (j *Journal) Size(ctx context.Context) (onDisk, free int64, err error) { return j.db.Size(ctx) }
